// libFuzzer target: the recipe loader as `engine check` runs it, from a file a user wrote.
//   Input: TOML text, written to a file and passed to load_recipe() with the built-in registries:
//   TOML parsing, `base` inheritance, --set overrides, the closed schema and every component's
//   option reader. Each line "#--set key.path=value" (a TOML comment, so a seed stays a valid
//   recipe) is also passed as a --set override, in order.
//   Expected: a Recipe, or engine::UserError. Anything else (another exception, a crash, an
//   ASan/UBSan report, a hang) is a finding.
// Run from the repository root (tools/fuzz.sh does): recipes name data/mnist/... relative to it.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/core/errors.h"
#include "engine/trainer/recipe.h"

namespace fs = std::filesystem;

namespace {

const engine::Registries& registries() {
  static const engine::Registries reg = engine::make_registries();
  return reg;
}

// The input is written as <tmp>/tests/recipes/input.toml, beside links to every shipped recipe
// and below <tmp>/recipes -> the real recipes/: both `base` spellings the shipped recipes use
// ("x.toml" and "../../recipes/x.toml") resolve, so mutations of real recipes reach the merge.
std::string input_path() {
  static const std::string path = [] {
    fs::path root = fs::temp_directory_path() / ("engine_recipe_fuzz_" + std::to_string(getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "tests" / "recipes");
    const fs::path recipes = fs::path(ENGINE_SOURCE_DIR) / "recipes";
    fs::create_directory_symlink(recipes, root / "recipes");
    for (const auto& e : fs::directory_iterator(recipes))
      fs::create_symlink(e.path(), root / "tests" / "recipes" / e.path().filename());
    return (root / "tests" / "recipes" / "input.toml").string();
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (text.compare(at, 7, "#--set ") == 0) overrides.push_back(text.substr(at + 7, end - at - 7));
    at = end + 1;
  }
  const std::string path = input_path();
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  try {
    engine::load_recipe(path, overrides, registries());
  } catch (const engine::UserError& e) {
    // the expected outcome of a bad recipe; ENGINE_FUZZ_VERBOSE=1 shows it (checking a seed)
    if (std::getenv("ENGINE_FUZZ_VERBOSE")) std::fprintf(stderr, "UserError: %s\n", e.what());
  }
  return 0;
}
