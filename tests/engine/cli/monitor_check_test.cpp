// A callback `monitor` that names no value of the run is a recipe error found by `engine check`
// (exit 2, file:line:col, the nearest value), never a run that silently stops (early_stopping
// reading nothing) or fails after its first epoch (checkpoint_best).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// The shipped recipe with `from` replaced by `to` (and `extra` appended), in a temp dir.
std::string edited_recipe(const std::string& tag, const std::string& from, const std::string& to,
                          const std::string& extra = "") {
  std::ifstream in(source_path("recipes/mnist_convnext.toml"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "recipe no longer contains: " << from);
  text.replace(at, from.size(), to);
  std::string path = temp_dir("monitor_" + tag) + "/r.toml";
  std::ofstream(path) << text << extra;
  return path;
}

// "file:line:" of the first line holding `needle`.
std::string position_of(const std::string& file, const std::string& needle) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return file + ":" + std::to_string(n) + ":";
  FAIL("no line holds " << needle);
  return "";
}

CommandResult check_with(const std::string& recipe, const std::string& sets = "") {
  return run_engine("check " + recipe + sets);
}

}  // namespace

TEST_CASE("a typo'd checkpoint_best monitor is an engine check error with the nearest value") {
  auto r = edited_recipe("best", "monitor = \"valid/accuracy\"", "monitor = \"valid/acuracy\"");
  auto res = check_with(r);
  CHECK(res.exit_code == 2);
  CHECK_MESSAGE(has(res, position_of(r, "valid/acuracy")), res.output);
  CHECK_MESSAGE(has(res, "callbacks[0].monitor: checkpoint_best: monitors \"valid/acuracy\", which this run does not produce"),
                res.output);
  CHECK(has(res, "did you mean \"valid/accuracy\"?"));
}

TEST_CASE("a typo'd early_stopping monitor is reported together with every other error") {
  auto r = edited_recipe("early", "weight_decay =", "weight_decya =",
                         "\n[[callbacks]]\nname = \"early_stopping\"\nmonitor = \"valid/los\"\npatience = 2\n");
  auto res = check_with(r);
  CHECK(res.exit_code == 2);
  CHECK_MESSAGE(has(res, position_of(r, "valid/los\"")), res.output);
  CHECK(has(res, "callbacks[1].monitor: early_stopping: monitors \"valid/los\""));
  CHECK(has(res, "did you mean \"valid/loss\"?"));
  CHECK(has(res, "optimizer.weight_decya: unknown key"));  // one `engine check`, all errors
}

TEST_CASE("a default monitor the run does not produce points at the callback's table") {
  // checkpoint_best watches valid/accuracy by default; this recipe measures only error_rate.
  auto r = edited_recipe("default", "[[callbacks]]\nname = \"checkpoint_best\"\nmonitor = \"valid/accuracy\"\n",
                         "[[callbacks]]\nname = \"checkpoint_best\"\n");
  auto res = check_with(r, " --set 'train.metrics=[\"error_rate\"]'");
  CHECK(res.exit_code == 2);
  CHECK_MESSAGE(has(res, "checkpoint_best: monitors \"valid/accuracy\" (its default), which this run does not produce"),
                res.output);
  CHECK(has(res, position_of(r, "[[callbacks]]")));  // the table: there is no monitor key to point at
  CHECK(has(res, "valid/error_rate"));  // listed among the run's values
}

TEST_CASE("valid_ema/* is a monitor only when train.ema is on, test/accuracy never is") {
  auto r = edited_recipe("ema", "monitor = \"valid/accuracy\"", "monitor = \"valid_ema/accuracy\"");
  auto off = check_with(r);
  CHECK(off.exit_code == 2);
  CHECK(has(off, "monitors \"valid_ema/accuracy\", which this run does not produce"));
  CHECK(has(off, "did you mean \"valid/accuracy\"?"));
  auto on = check_with(r, " --set train.ema.enabled=true");
  CHECK_MESSAGE(on.exit_code == 0, on.output);

  // test/accuracy is a value of the run (an [expect] key), but measured once after training.
  auto t = edited_recipe("test", "monitor = \"valid/accuracy\"", "monitor = \"test/accuracy\"");
  auto res = check_with(t);
  CHECK(res.exit_code == 2);
  CHECK(has(res, "test/accuracy is measured once after training, not per epoch"));
}
