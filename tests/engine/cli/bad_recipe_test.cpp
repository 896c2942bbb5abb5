// What a user sees for each kind of bad recipe: exit code 2, one line per error naming
// file:line:col and the key path, a hint, and nothing trained (no run directory).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// The shipped recipe with one line replaced, written to a temp dir; returns its path.
std::string broken_recipe(const std::string& tag, const std::string& from, const std::string& to) {
  std::ifstream in(source_path("recipes/mnist_convnext.toml"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "recipe no longer contains: " << from);
  text.replace(at, from.size(), to);
  std::string dir = temp_dir("bad_" + tag);
  std::string path = dir + "/r.toml";
  std::ofstream(path) << text;
  return path;
}

int line_of(const std::string& file, const std::string& needle) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return -1;
}

CommandResult check_recipe(const std::string& recipe) { return run_engine("check " + recipe); }

// `engine check` of the recipe exits 2 and names "file:line:" of the line holding `needle`.
CommandResult check_fails_at(const std::string& recipe, const std::string& needle) {
  auto res = check_recipe(recipe);
  CHECK(res.exit_code == 2);
  std::string where = recipe + ":" + std::to_string(line_of(recipe, needle)) + ":";
  CHECK_MESSAGE(res.output.find(where) != std::string::npos, where << " not in: " << res.output);
  return res;
}

}  // namespace

TEST_CASE("a typo'd key names file:line:col and suggests the nearest key") {
  auto r = broken_recipe("typo", "weight_decay =", "weight_decya =");
  auto res = check_fails_at(r, "weight_decya");
  CHECK(res.output.find("optimizer.weight_decya: unknown key") != std::string::npos);
  CHECK(res.output.find("did you mean \"weight_decay\"") != std::string::npos);
}

TEST_CASE("a wrong type names the key and what was expected") {
  auto r = broken_recipe("type", "epochs =", "epochs = \"many\" #");
  auto res = check_fails_at(r, "epochs = \"many\"");
  CHECK(res.output.find("train.epochs: expected int, got a string") != std::string::npos);
}

TEST_CASE("an unknown component lists the known ones and the closest") {
  auto r = broken_recipe("component", "name = \"convnext_atto\"", "name = \"convnext_ato\"");
  auto res = check_fails_at(r, "convnext_ato");
  CHECK(res.output.find("unknown model \"convnext_ato\"") != std::string::npos);
  CHECK(res.output.find("did you mean \"convnext_atto\"") != std::string::npos);
  // The model's other keys are not reported a second time as unknown.
  CHECK(res.output.find("in_chans: unknown key") == std::string::npos);
}

TEST_CASE("a missing data file is reported with its position and how to fetch it") {
  auto r = broken_recipe("missing", "data/mnist/train.csv", "data/mnist/nope.csv");
  auto res = check_recipe(r);
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("data.dataset.path: file not found: data/mnist/nope.csv") != std::string::npos);
}

TEST_CASE("all errors are reported at once, and run trains nothing on a bad recipe") {
  auto r = broken_recipe("many", "weight_decay =", "weight_decya =");
  {
    std::string text;
    std::ifstream in(r);
    text.assign((std::istreambuf_iterator<char>(in)), {});
    auto at = text.find("epochs =");
    text.replace(at, 8, "epochs = -1 #");
    std::ofstream(r) << text;
  }
  auto res = check_recipe(r);
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("2 errors") != std::string::npos);
  std::string out = temp_dir("bad_run_out");
  auto run = run_command("cd " + source_path("") + " && " + engine_binary() + " run " + r +
                         " --set run.output_dir=" + out + "/run");
  CHECK(run.exit_code == 2);
  CHECK_FALSE(std::filesystem::exists(out + "/run"));
}

TEST_CASE("every shipped recipe passes engine check") {
  // The fine-tuning recipe's pretrained file is the output of another recipe's run: its schema is
  // checked here without it (a missing file is an error, as it should be, until that run exists).
  auto res = run_command("cd " + source_path("") + " && " + engine_binary() + " check recipes/*.toml --set model.pretrained=");
  CHECK_MESSAGE(res.exit_code == 0, res.output);
}

TEST_CASE("bad command-line overrides and arguments are exit code 2") {
  auto res = run_command("cd " + source_path("") + " && " + engine_binary() +
                         " check recipes/mnist_convnext.toml --set optimizer.lr=-1");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("--set: optimizer.lr: value -1 is out of range") != std::string::npos);
  CHECK(run_command(engine_binary() + " frobnicate").exit_code == 2);
  CHECK(run_command(engine_binary() + " list modles").exit_code == 2);
}
