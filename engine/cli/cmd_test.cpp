// engine test: run recipes and compare their results with their [expect] bounds. The regression
// gate teams put in CI: exit 1 when any bound is missed, 2 when a recipe is invalid.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "engine/accelerator/accelerator.h"
#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/trainer/trainer.h"

namespace engine {

namespace {

std::vector<std::string> expand(const std::vector<std::string>& targets) {
  std::vector<std::string> files;
  for (const auto& t : targets) {
    if (std::filesystem::is_directory(t)) {
      std::vector<std::string> in_dir;
      for (const auto& e : std::filesystem::directory_iterator(t))
        if (e.path().extension() == ".toml") in_dir.push_back(e.path().string());
      std::sort(in_dir.begin(), in_dir.end());
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else {
      files.push_back(t);
    }
  }
  return files;
}

}  // namespace

int cmd_test(const Registries& reg, const std::vector<std::string>& targets, const std::vector<std::string>& overrides) {
  std::vector<std::string> report;
  int failed = 0, ran = 0;
  for (const auto& file : expand(targets)) {
    Recipe recipe = load_recipe(file, overrides, reg);
    if (recipe.expect.empty()) {
      report.push_back(fmt::format("skip  {}: no [expect] section", file));
      continue;
    }
    auto acc = Accelerator::create(recipe.accelerator);
    Trainer trainer(recipe, *acc);
    auto summary = trainer.run();
    ++ran;
    for (const auto& [key, bound] : recipe.expect) {
      auto it = std::find_if(summary.begin(), summary.end(), [&](const auto& kv) { return kv.first == key; });
      double v = it == summary.end() ? NAN : it->second;
      bool ok = !std::isnan(v) && (!bound.min || v >= *bound.min) && (!bound.max || v <= *bound.max);
      std::string range = fmt::format("{}{}{}", bound.min ? fmt::format(">= {}", *bound.min) : "",
                                      bound.min && bound.max ? ", " : "", bound.max ? fmt::format("<= {}", *bound.max) : "");
      report.push_back(fmt::format("{}  {}: {} = {:.6f} (expected {}; {})", ok ? "PASS" : "FAIL", file, key, v, range,
                                   bound.where.str()));
      failed += ok ? 0 : 1;
    }
  }
  {
    std::printf("\nengine test: %d recipe%s run\n", ran, ran == 1 ? "" : "s");
    for (const auto& line : report) std::printf("%s\n", line.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace engine
