// `engine test` as a CI gate and `engine test --record` as its baseline keeper, on a real run that
// takes seconds: convnext_atto, 2 optimizer steps on 128 real MNIST digits, validated on 64.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>

#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// A tiny recipe whose [expect] is `expect` (text of the section's lines), in its own temp dir.
std::string tiny_recipe(const std::string& tag, const std::string& expect) {
  mnist_file("train.csv");
  const std::string dir = temp_dir("cmd_test_" + tag);
  const std::string path = dir + "/tiny.toml";
  std::ofstream(path) << "# engine test " << path << "\n"
                      << "[run]\nname = \"tiny\"\nseed = 7\noutput_dir = \"" << dir << "/run\"\n"
                      << "[accelerator]\nthreads = 1\n"
                         "[data]\n"
                         "dataset = { name = \"digit_csv\", path = \"data/mnist/train.csv\" }\n"
                         "split = { valid_fraction = 0.2, seed = 42, max_train = 128, max_valid = 64 }\n"
                         "batch_size = 32\nworkers = 0   # loading on the training thread: reproducible\n"
                         "[[data.train_transforms]]\nname = \"resize\"\nsize = [32, 32]\n"
                         "[[data.eval_transforms]]\nname = \"resize\"\nsize = [32, 32]\n"
                         "[model]\nname = \"convnext_atto\"\nin_chans = 1\nnum_classes = 10\n"
                         "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n"
                         "[train]\nepochs = 1\nmax_steps = 2\n"
                         "[expect]   # the gate\n"
                      << expect;
  return path;
}

CommandResult engine_test(const std::string& recipe, const std::string& flags = "") {
  return run_command("cd " + source_path("") + " && ENGINE_THREADS=1 " + engine_binary() + " test " + flags + " " +
                     recipe);
}

// The table row of `metric`: {expected, got, verdict}; empty when the table has no such row.
std::vector<std::string> row(const CommandResult& r, const std::string& metric) {
  std::smatch m;
  const std::regex line("\n  " + metric + R"( +(\S.*?) {2,}(\S+) +(PASS|FAIL|RECORDED)\n)");
  if (!std::regex_search(r.output, m, line)) return {};
  return {m[1], m[2], m[3]};
}

const std::string loss_line = "\"valid/loss\" = { equals = 100.0, rel = 0.001 }   # baseline: keep this comment\n";

}  // namespace

TEST_CASE("a value outside its equals tolerance fails the gate: exit 1 and a FAIL row in the table") {
  auto recipe = tiny_recipe("fail", loss_line + "\"valid/accuracy\" = { min = 0.0 }\n");
  auto res = engine_test(recipe);
  CHECK_MESSAGE(res.exit_code == 1, res.output);
  auto loss = row(res, "valid/loss");
  REQUIRE_MESSAGE(loss.size() == 3, res.output);
  CHECK(loss[0] == "100 +/- 0.1%");
  CHECK(std::strtod(loss[1].c_str(), nullptr) < 10);  // the real loss, far from 100
  CHECK(loss[2] == "FAIL");
  auto acc = row(res, "valid/accuracy");
  REQUIRE(acc.size() == 3);
  CHECK(acc[0] == ">= 0");
  CHECK(acc[2] == "PASS");
  CHECK(has(res, "\n  metric          expected      got"));  // one header, columns aligned
  CHECK(has(res, "engine test: 1 recipe run, 2 bounds: 1 passed, 1 failed"));
}

TEST_CASE("--record writes the measured value in place, keeps every other byte, and the recipe then passes") {
  auto recipe = tiny_recipe("record", loss_line + "\"valid/accuracy\" = { min = 0.0 }   # a threshold: never rewritten\n");
  const std::string before = read_text(recipe);
  const size_t at = before.find("100.0");

  auto rec = engine_test(recipe, "--record");
  CHECK_MESSAGE(rec.exit_code == 0, rec.output);
  auto loss = row(rec, "valid/loss");
  REQUIRE_MESSAGE(loss.size() == 3, rec.output);
  CHECK(loss[2] == "RECORDED");
  CHECK(has(rec, recipe + ": 2 bounds, 0 failed"));
  CHECK(has(rec, "recorded into " + recipe + " (1 value)"));
  CHECK(has(rec, "engine test --record: 1 recipe run, 2 bounds: 1 passed, 0 failed, 1 recorded"));

  // Only the number changed: the bytes before it and after it are the original ones.
  const std::string after = read_text(recipe);
  const std::string tail = before.substr(at + 5);
  REQUIRE(after.size() > tail.size());
  CHECK(after.compare(0, at, before, 0, at) == 0);
  CHECK(after.compare(after.size() - tail.size(), tail.size(), tail) == 0);
  const std::string written = after.substr(at, after.size() - tail.size() - at);
  CHECK(written == loss[1]);  // the table shows what was written
  const double value = std::strtod(written.c_str(), nullptr);
  CHECK(value > 0);
  CHECK(value < 10);

  // The same run on the same machine reproduces its own baseline.
  auto again = engine_test(recipe);
  CHECK_MESSAGE(again.exit_code == 0, again.output);
  auto checked = row(again, "valid/loss");
  REQUIRE_MESSAGE(checked.size() == 3, again.output);
  CHECK(checked[0] == written + " +/- 0.1%");
  CHECK(checked[2] == "PASS");
  CHECK(has(again, "engine test: 1 recipe run, 2 bounds: 2 passed, 0 failed"));
}

TEST_CASE("--record into a recipe with a base writes the child's own line and leaves the base untouched") {
  // The shape of tests/recipes/*_quick.toml: a short child of a shipped recipe, with its own [expect].
  auto base = tiny_recipe("record_base", "\"valid/accuracy\" = { min = 0.0 }\n");
  const std::string child = std::filesystem::path(base).parent_path().string() + "/child.toml";
  std::ofstream(child) << "base = \"tiny.toml\"\n[train]\nmax_steps = 1\n[expect]\n" << loss_line;
  const std::string base_before = read_text(base), child_before = read_text(child);
  auto res = engine_test(child, "--record");
  CHECK_MESSAGE(res.exit_code == 0, res.output);
  CHECK(has(res, "recorded into " + child + " (1 value)"));
  CHECK(read_text(base) == base_before);
  const std::string after = read_text(child);
  CHECK(after != child_before);
  CHECK(after.find("\"valid/loss\" = { equals = 100.0,") == std::string::npos);
  CHECK(after.find(", rel = 0.001 }   # baseline: keep this comment\n") != std::string::npos);
}

TEST_CASE("--record takes no baseline from a run that misses one of its bounds") {
  auto recipe = tiny_recipe("record_fail", loss_line + "\"valid/accuracy\" = { min = 0.999 }\n");
  const std::string before = read_text(recipe);
  auto res = engine_test(recipe, "--record");
  CHECK_MESSAGE(res.exit_code == 1, res.output);
  CHECK(has(res, "nothing recorded: a bound failed"));
  auto acc = row(res, "valid/accuracy");
  REQUIRE_MESSAGE(acc.size() == 3, res.output);
  CHECK(acc[2] == "FAIL");
  CHECK(read_text(recipe) == before);
}

TEST_CASE("a missing tolerance, an unknown bound key or a value not in the summary is exit 2 at file:line:col, before any run") {
  auto recipe = tiny_recipe("invalid",
                            "\"valid/loss\" = { equals = 0.5 }\n"
                            "\"valid/accuracy\" = { min = 0.5, equals = 0.9, rell = 0.01 }\n"
                            "\"train/loss\" = { max = 5 }\n");
  auto res = engine_test(recipe);
  CHECK(res.exit_code == 2);
  // The [expect] lines are the file's last three.
  int lines = 0;
  for (char c : read_text(recipe)) lines += c == '\n';
  const std::string loss_at = recipe + ":" + std::to_string(lines - 2) + ":27: expect.valid/loss.equals: ";
  const std::string key_at = recipe + ":" + std::to_string(lines - 1) + ":54: expect.valid/accuracy.rell: ";
  const std::string train_at = recipe + ":" + std::to_string(lines) + ":16: expect.train/loss: ";
  CHECK_MESSAGE(has(res, loss_at + "equals needs a tolerance: add abs = ... and/or rel = ..."), res.output);
  CHECK_MESSAGE(has(res, key_at + "unknown key (did you mean \"rel\"?"), res.output);
  // train/loss is logged per epoch, never summarised: it would fail every run as "not produced".
  CHECK_MESSAGE(has(res, train_at + "this run reports no \"train/loss\" in its summary (train/loss is logged per epoch"),
                res.output);
  CHECK(has(res, "engine test: no recipe was run"));
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(recipe).parent_path() / "run"));
}

TEST_CASE("--record refuses a baseline that lives on the command line") {
  auto recipe = tiny_recipe("record_set", loss_line);
  auto res = engine_test(recipe, "--record --set expect.valid/loss.equals=0.5");
  CHECK(res.exit_code == 2);
  CHECK_MESSAGE(has(res, "expect.valid/loss.equals: given with --set, so --record has no recipe line to write it into"),
                res.output);
}
