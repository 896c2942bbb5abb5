#include "engine/recipe/options.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "engine/core/errors.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {
std::string write_recipe(const std::string& dir, const std::string& name, const std::string& text) {
  std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}
}  // namespace

TEST_CASE("options read typed values, fill defaults and mirror them into the resolved recipe") {
  auto dir = test::temp_dir("options");
  auto file = write_recipe(dir, "r.toml", "[optimizer]\nlr = 1\nname = \"adamw\"\n");
  RecipeDocument doc(file, {});
  Options root = doc.root();
  Options opt = root.table("optimizer", "");
  CHECK(opt.text("name", "", "") == "adamw");
  CHECK(opt.number("lr", 0.5, "") == 1.0);          // integers are accepted as floats
  CHECK(opt.number("weight_decay", 0.01, "") == 0.01);  // default
  doc.finish();
  CHECK(doc.diagnostics().ok());
  std::string resolved = doc.resolved_toml();
  CHECK(resolved.find("weight_decay = 0.01\n") != std::string::npos);
}

TEST_CASE("every error is collected with file:line:col, key path and a hint") {
  auto dir = test::temp_dir("options_err");
  auto file = write_recipe(dir, "r.toml",
                           "[train]\nepochs = \"five\"\nbatch_szie = 3\n[data]\nworkers = -1\n");
  RecipeDocument doc(file, {});
  Options root = doc.root();
  Options train = root.table("train", "");
  train.integer("epochs", 1, "", 1);
  train.integer("batch_size", 64, "", 1);
  Options data = root.table("data", "");
  data.integer("workers", 2, "", 0);
  doc.finish();
  const auto& lines = doc.diagnostics().lines();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == file + ":2:10: train.epochs: expected int, got a string");
  CHECK(lines[1].find(file + ":5:11: data.workers: value -1 is out of range, expected >= 0") == 0);
  CHECK(lines[2] == file + ":3:14: train.batch_szie: unknown key (did you mean \"batch_size\"?)");
  CHECK_THROWS_AS(doc.diagnostics().throw_if_any(), UserError);
}

TEST_CASE("choices suggest the nearest valid value") {
  auto dir = test::temp_dir("options_choice");
  auto file = write_recipe(dir, "r.toml", "mode = \"bf61\"\n");
  RecipeDocument doc(file, {});
  Options root = doc.root();
  root.choice("mode", "no", {"no", "bf16", "fp16"}, "");
  REQUIRE(doc.diagnostics().lines().size() == 1);
  CHECK(doc.diagnostics().lines()[0].find("did you mean \"bf16\"") != std::string::npos);
}

TEST_CASE("--set overrides any key, bare words are strings, and base recipes are inherited") {
  auto dir = test::temp_dir("options_set");
  write_recipe(dir, "base.toml", "[run]\nname = \"base\"\nseed = 1\n[optimizer]\nlr = 0.1\nname = \"sgd\"\n");
  auto file = write_recipe(dir, "child.toml", "base = \"base.toml\"\n[optimizer]\nlr = 0.2\n");
  RecipeDocument doc(file, {"run.name=quick", "run.seed=7", "train.epochs=3"});
  Options root = doc.root();
  Options run = root.table("run", "");
  CHECK(run.text("name", "", "") == "quick");
  CHECK(run.integer("seed", 0, "") == 7);
  Options opt = root.table("optimizer", "");
  CHECK(opt.number("lr", 0, "") == 0.2);       // child overrides base
  CHECK(opt.text("name", "", "") == "sgd");    // base value kept
  CHECK(root.table("train", "").integer("epochs", 1, "") == 3);
  doc.finish();
  CHECK(doc.diagnostics().ok());
}

TEST_CASE("a TOML syntax error names file:line:col") {
  auto dir = test::temp_dir("options_syntax");
  auto file = write_recipe(dir, "r.toml", "[run]\nname = \n");
  try {
    RecipeDocument doc(file, {});
    FAIL("expected a syntax error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find(file + ":2:") == 0);
  }
}

TEST_CASE("describe mode documents every key with its default") {
  std::vector<OptionDoc> docs;
  Options o = Options::describe(&docs);
  o.number("lr", 1e-3, "learning rate", 0);
  o.table("split", "").number("valid_fraction", 0.2, "held-out fraction");
  REQUIRE(docs.size() == 3);
  CHECK(docs[0].key == "lr");
  CHECK(docs[0].default_value == "0.001");
  CHECK(docs[2].key == "split.valid_fraction");
}

TEST_CASE("--set reaches into arrays of tables by index, with a clear error when out of range") {
  auto dir = test::temp_dir("options_index");
  auto file = write_recipe(dir, "r.toml", "[[t]]\nname = \"a\"\n[[t]]\nname = \"b\"\np = 0.5\n");
  RecipeDocument doc(file, {"t[1].p=1.0", "t[0].size=[40, 40]"});
  Options root = doc.root();
  auto ts = root.tables("t", "");
  REQUIRE(ts.size() == 2);
  CHECK(ts[1].number("p", 0, "") == 1.0);
  CHECK(ts[0].integers("size", {}, "") == std::vector<int64_t>{40, 40});
  CHECK_THROWS_WITH_AS(RecipeDocument(file, {"t[2].p=1"}), doctest::Contains("has no element 2 (it has 2)"), UserError);
  CHECK_THROWS_AS(RecipeDocument(file, {"t[x].p=1"}), UserError);
}

TEST_CASE("the resolved recipe writes floats exactly and briefly") {
  auto dir = test::temp_dir("options_floats");
  auto file = write_recipe(dir, "r.toml", "mean = [0.1310]\nlr = 2e-3\nthird = 0.3333333333333333\n");
  RecipeDocument doc(file, {});
  Options root = doc.root();
  root.numbers("mean", {}, "");
  root.number("lr", 0, "");
  CHECK(root.number("third", 0, "") == 1.0 / 3.0);
  std::string r = doc.resolved_toml();
  CHECK_MESSAGE(r.find("mean = [ 0.131 ]") != std::string::npos, r);
  CHECK(r.find("lr = 0.002") != std::string::npos);
  CHECK(r.find("third = 0.3333333333333333\n") != std::string::npos);  // round-trips, not truncated
}

TEST_CASE("the resolved recipe leaves strings alone: digits in a name are no float, 40,000 of them no crash") {
  // The float rewrite once ran a regex over the whole text: it turned "v1.00000000000000000001"
  // into "v1.0", and it recursed once per digit, so `engine check` on a recipe with a 40,000-digit
  // string died of a segmentation fault (fuzz/corpus/recipe/regress_long_digit_string.toml).
  auto dir = test::temp_dir("options_float_strings");
  const std::string digits = "1." + std::string(40000, '0') + "1";
  auto file = write_recipe(dir, "r.toml",
                           "name = \"v1.00000000000000000001\"\nlong = '" + digits + "'\n[t]\n"
                           "x = [0.1310, 1.0000000000000001e-05]\nnote = \"\"\"\nlr = 0.13100000000000001\"\"\"\n");
  RecipeDocument doc(file, {});
  Options root = doc.root();
  CHECK(root.text("name", "", "") == "v1.00000000000000000001");
  CHECK(root.text("long", "", "") == digits);
  Options t = root.table("t", "");
  t.numbers("x", {}, "");
  t.text("note", "", "");
  std::string r = doc.resolved_toml();
  CHECK(r.find("v1.00000000000000000001") != std::string::npos);
  CHECK(r.find(digits) != std::string::npos);
  CHECK_MESSAGE(r.find("x = [ 0.131, 1e-05 ]") != std::string::npos, r.substr(r.find("[t]")));
  CHECK(r.find("lr = 0.13100000000000001") != std::string::npos);  // inside a string: as written
  std::vector<OptionDoc> docs;  // `engine list` prints defaults through the same rewrite
  Options::describe(&docs).numbers("mean", {0.131, 0.9998}, "");
  CHECK(docs.at(0).default_value == "[ 0.131, 0.9998 ]");
}
