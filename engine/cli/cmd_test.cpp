// engine test: run recipes and compare their results with their [expect] bounds. The regression
// gate teams put in CI: exit 1 when any bound is missed, 2 when a recipe is invalid.
// engine test --record: the same runs, and each `equals` baseline is rewritten in place with the
// measured value (min/max are thresholds a person chose: checked, never rewritten).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "engine/accelerator/accelerator.h"
#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/trainer/expect_rewrite.h"
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

struct Row {
  std::string metric, expected, got, verdict;
};

struct RecipeResult {
  std::string title;  // "file: ..." line above the table
  std::vector<Row> rows;
};

// The measured value with as few digits as show the verdict honestly: 6 significant digits, more
// when rounding to 6 would make a failing value look passing (0.96999999 against >= 0.97) or a
// value look equal to a baseline it differs from.
std::string got_text(double got, const Bound& b) {
  for (int digits = 6; digits <= 17; ++digits) {
    std::string s = fmt::format("{:.{}g}", got, digits);
    double shown = std::strtod(s.c_str(), nullptr);
    bool same_verdict = b.holds(shown) == b.holds(got);
    bool same_gap = !b.equals || (shown == *b.equals) == (got == *b.equals);
    if (same_verdict && same_gap) return s;
  }
  return fmt::format("{}", got);
}

void print_table(const RecipeResult& r) {
  const Row header{"metric", "expected", "got", "verdict"};
  size_t w[3] = {header.metric.size(), header.expected.size(), header.got.size()};
  for (const auto& row : r.rows) {
    w[0] = std::max(w[0], row.metric.size());
    w[1] = std::max(w[1], row.expected.size());
    w[2] = std::max(w[2], row.got.size());
  }
  std::printf("%s\n", r.title.c_str());
  auto line = [&](const Row& row) {
    std::printf("  %-*s  %-*s  %-*s  %s\n", static_cast<int>(w[0]), row.metric.c_str(), static_cast<int>(w[1]),
                row.expected.c_str(), static_cast<int>(w[2]), row.got.c_str(), row.verdict.c_str());
  };
  if (!r.rows.empty()) line(header);
  for (const auto& row : r.rows) line(row);
}

// Loads every recipe before any training, so that one bad recipe in a directory is reported with
// all the others' errors (exit 2) instead of after an hour of runs.
std::vector<Recipe> load_all(const Registries& reg, const std::vector<std::string>& files,
                             const std::vector<std::string>& overrides, bool record) {
  std::vector<Recipe> recipes;
  std::string errors;
  for (const auto& file : files) {
    try {
      recipes.push_back(load_recipe(file, overrides, reg));
    } catch (const UserError& e) {
      errors += std::string(e.what()) + "\n";
      continue;
    }
    if (!record) continue;
    for (const auto& [key, bound] : recipes.back().expect) {
      if (!bound.equals) continue;
      const SourcePos& at = bound.equals_at;
      if (at.line == 0)
        errors += fmt::format("{}: expect.{}.equals: given with --set, so --record has no recipe line to write it into\n",
                              file, key);
      else if (::access(at.file.c_str(), W_OK) != 0)
        errors += fmt::format("{}: expect.{}.equals: --record cannot write {} (not writable)\n", at.str(), key, at.file);
    }
  }
  if (!errors.empty()) throw UserError(errors + "engine test: no recipe was run");
  return recipes;
}

// Writes the measured `equals` values into the files the bounds were read from (a `base` recipe's
// when the bound lives there). The recipe is read again first: an earlier recipe of this command
// may have recorded into a shared base, and its positions must be current.
std::string record(const Registries& reg, const std::string& file, const std::vector<std::string>& overrides,
                   const std::map<std::string, double>& measured) {
  Recipe fresh = load_recipe(file, overrides, reg);
  std::map<std::string, std::vector<TomlNumberEdit>> by_file;
  for (const auto& [key, value] : measured) {
    auto it = fresh.expect.find(key);
    if (it == fresh.expect.end() || !it->second.equals)
      throw UserError(file + ": expect." + key + ".equals was removed from the recipe during the run");
    const Bound& b = it->second;
    by_file[b.equals_at.file].push_back(
        {b.equals_at.line, b.equals_at.column, *b.equals, baseline_text(value, b.tolerance()), "expect." + key + ".equals"});
  }
  std::vector<std::string> written;
  for (const auto& [path, edits] : by_file) {
    rewrite_numbers(path, edits);
    written.push_back(fmt::format("{} ({} value{})", path, edits.size(), edits.size() == 1 ? "" : "s"));
  }
  std::string out;
  for (const auto& w : written) out += (out.empty() ? "" : ", ") + w;
  return out;
}

}  // namespace

int cmd_test(const Registries& reg, const std::vector<std::string>& targets, const std::vector<std::string>& overrides,
             bool record_baselines) {
  const std::vector<std::string> files = expand(targets);
  std::vector<Recipe> recipes = load_all(reg, files, overrides, record_baselines);
  std::vector<RecipeResult> results;
  int ran = 0, skipped = 0;
  for (const Recipe& recipe : recipes) {
    if (recipe.expect.empty()) {
      results.push_back({fmt::format("{}: skipped, no [expect] section", recipe.file), {}});
      ++skipped;
      continue;
    }
    auto start = std::chrono::steady_clock::now();
    auto acc = Accelerator::create(recipe.accelerator);
    Trainer trainer(recipe, *acc);
    const Values summary = trainer.run();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++ran;

    RecipeResult result;
    std::map<std::string, double> to_record;
    int recipe_failed = 0;
    for (const auto& [key, bound] : recipe.expect) {
      auto it = std::find_if(summary.begin(), summary.end(), [&, &key = key](const auto& kv) { return kv.first == key; });
      Row row{key, bound.describe(), "", ""};
      bool ok;
      if (it == summary.end()) {
        // Validation checked that the recipe produces this value; a run that still lacks it is a
        // failed gate, never a skipped one.
        row.got = "(not produced)";
        ok = false;
      } else if (record_baselines && bound.equals) {
        const double got = it->second;
        ok = std::isfinite(got) && bound.within_limits(got);
        row.got = std::isfinite(got) ? baseline_text(got, bound.tolerance()) : got_text(got, bound);
        if (ok) to_record[key] = got;
      } else {
        ok = bound.holds(it->second);
        row.got = got_text(it->second, bound);
      }
      row.verdict = !ok ? "FAIL" : to_record.count(key) ? "RECORDED" : "PASS";
      recipe_failed += ok ? 0 : 1;
      result.rows.push_back(row);
    }
    result.title = fmt::format("{}: {} bound{}, {} failed ({:.1f} s)", recipe.file, recipe.expect.size(),
                               recipe.expect.size() == 1 ? "" : "s", recipe_failed, seconds);
    if (record_baselines && recipe_failed) {
      // A baseline is taken only from a run that meets every bound it is checked against.
      for (auto& row : result.rows)
        if (row.verdict == "RECORDED") row.verdict = "NOT RECORDED";
      result.title += "; nothing recorded: a bound failed";
    } else if (record_baselines && !to_record.empty()) {
      try {
        result.title += "; recorded into " + record(reg, recipe.file, overrides, to_record);
      } catch (const std::exception& e) {
        for (auto& row : result.rows)
          if (row.verdict == "RECORDED") row.verdict = "FAIL";
        result.title += std::string("; NOT recorded: ") + e.what();
      }
    } else if (record_baselines) {
      result.title += "; nothing to record: no equals bound (min/max are never rewritten)";
    }
    results.push_back(std::move(result));
  }

  int bounds = 0, passed = 0, failed = 0, recorded = 0;
  for (const auto& r : results)
    for (const auto& row : r.rows) {
      ++bounds;
      passed += row.verdict == "PASS";
      failed += row.verdict == "FAIL";
      recorded += row.verdict == "RECORDED";
    }
  std::printf("\n");
  for (const auto& r : results) print_table(r);
  std::string summary = fmt::format("engine test{}: {} recipe{} run", record_baselines ? " --record" : "", ran,
                                    ran == 1 ? "" : "s");
  if (skipped) summary += fmt::format(" ({} skipped: no [expect])", skipped);
  summary += fmt::format(", {} bound{}: {} passed, {} failed", bounds, bounds == 1 ? "" : "s", passed, failed);
  if (record_baselines) summary += fmt::format(", {} recorded", recorded);
  std::printf("%s\n", summary.c_str());
  return failed ? 1 : 0;
}

}  // namespace engine
