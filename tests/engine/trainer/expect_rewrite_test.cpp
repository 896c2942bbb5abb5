// `engine test --record` edits recipes in place: only the recorded numbers change, at the
// positions the TOML parser reported, and every other byte (comments, layout, tolerances) stays.
#include "engine/trainer/expect_rewrite.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "engine/core/errors.h"
#include "engine/recipe/options.h"
#include "engine/trainer/expect.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {

// The edit that records `value` into the bound `key` of [expect], at the position the recipe
// reader reports: the same path as `engine test --record`.
TomlNumberEdit edit_of(const std::string& text, const std::string& key, const std::string& value) {
  auto doc = RecipeDocument::from_text("r.toml", text);
  Options expect = doc->root().table("expect", "");
  Options t = expect.table(key, "");
  Bound b = Bound::read(t);
  REQUIRE(b.equals);
  return {b.equals_at.line, b.equals_at.column, *b.equals, value, "expect." + key + ".equals"};
}

const std::string recipe =
    "# engine test r.toml\n"
    "[expect]   # bounds\n"
    "\"valid/loss\" = { equals = 0.5, abs = 1e-3 }   # recorded 2026-12-01\n"
    "\"valid/accuracy\" = {min=0.9,equals=+8_0.0e-2,rel=0.01} # compact spelling\n"
    "\"valid/αβ\" = { equals = 1.5, abs = 0.1 }   # non-ASCII key before the value\n";

}  // namespace

TEST_CASE("recorded numbers replace only their own bytes") {
  auto loss = edit_of(recipe, "valid/loss", "0.123456");
  auto acc = edit_of(recipe, "valid/accuracy", "0.8125");
  std::string out = apply_number_edits(recipe, "r.toml", {loss, acc});
  CHECK(out ==
        "# engine test r.toml\n"
        "[expect]   # bounds\n"
        "\"valid/loss\" = { equals = 0.123456, abs = 1e-3 }   # recorded 2026-12-01\n"
        "\"valid/accuracy\" = {min=0.9,equals=0.8125,rel=0.01} # compact spelling\n"
        "\"valid/αβ\" = { equals = 1.5, abs = 0.1 }   # non-ASCII key before the value\n");
}

TEST_CASE("a column after non-ASCII characters counts code points, as the parser does") {
  auto e = edit_of(recipe, "valid/αβ", "1.25");
  std::string out = apply_number_edits(recipe, "r.toml", {e});
  CHECK(out.find("\"valid/αβ\" = { equals = 1.25, abs = 0.1 }   # non-ASCII key before the value\n") !=
        std::string::npos);
  // With a byte order mark, which the parser skips before counting.
  std::string bom = "\xEF\xBB\xBF\"x\" = 2.0\n[expect]\n\"valid/loss\" = { equals = 0.5, abs = 1e-3 }\n";
  auto b = edit_of(bom, "valid/loss", "0.75");
  CHECK(apply_number_edits(bom, "r.toml", {b}) ==
        "\xEF\xBB\xBF\"x\" = 2.0\n[expect]\n\"valid/loss\" = { equals = 0.75, abs = 1e-3 }\n");
}

TEST_CASE("a file that changed since it was read is refused, not corrupted") {
  auto e = edit_of(recipe, "valid/loss", "0.123456");
  std::string edited = recipe;
  edited.replace(edited.find("0.5,"), 3, "0.6");  // someone changed the value meanwhile
  try {
    apply_number_edits(edited, "r.toml", {e});
    FAIL("no error");
  } catch (const UserError& err) {
    CHECK(std::string(err.what()).find("r.toml:3:27: expect.valid/loss.equals: expected the number being replaced here, found \"0.6\"") !=
          std::string::npos);
  }
  std::string shifted = "\n" + recipe;  // a line inserted above: the position holds no number
  CHECK_THROWS_AS(apply_number_edits(shifted, "r.toml", {e}), UserError);
}

TEST_CASE("rewrite_numbers replaces the file atomically and keeps its permissions") {
  auto dir = test::temp_dir("expect_rewrite");
  const std::string path = dir + "/r.toml";
  std::ofstream(path) << recipe;
  namespace fs = std::filesystem;
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  rewrite_numbers(path, {edit_of(recipe, "valid/loss", "0.25")});
  CHECK(test::read_text(path) == apply_number_edits(recipe, "r.toml", {edit_of(recipe, "valid/loss", "0.25")}));
  CHECK(fs::status(path).permissions() == (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK_FALSE(fs::exists(path + ".tmp"));
}
