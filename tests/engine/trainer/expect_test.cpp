// [expect] bounds as a user writes them: thresholds, recorded baselines with their tolerance, and
// the recipe errors that keep a gate from being silently wrong.
#include "engine/trainer/expect.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <memory>

#include "engine/recipe/options.h"

using namespace engine;

namespace {

// The bound `"valid/loss" = <table>` read from a one-line [expect] section, with its errors.
struct Read {
  Bound bound;
  std::vector<std::string> errors;
};

Read read(const std::string& table) {
  auto doc = RecipeDocument::from_text("r.toml", "[expect]\n\"valid/loss\" = " + table + "\n");
  Options expect = doc->root().table("expect", "");
  Options t = expect.table("valid/loss", "");
  Read r{Bound::read(t), {}};
  doc->finish();
  r.errors = doc->diagnostics().lines();
  return r;
}

}  // namespace

TEST_CASE("equals passes within max(abs, rel * |equals|) and fails outside") {
  auto abs = read("{ equals = 0.25, abs = 0.01 }");
  REQUIRE(abs.errors.empty());
  CHECK(abs.bound.holds(0.259));
  CHECK(abs.bound.holds(0.241));
  CHECK_FALSE(abs.bound.holds(0.2611));
  CHECK_FALSE(abs.bound.holds(0.2389));

  auto rel = read("{ equals = -2.0, rel = 0.05 }");  // 5% of |-2| = 0.1
  REQUIRE(rel.errors.empty());
  CHECK(rel.bound.tolerance() == doctest::Approx(0.1));
  CHECK(rel.bound.holds(-2.09));
  CHECK_FALSE(rel.bound.holds(-2.11));

  auto both = read("{ equals = 10, abs = 0.5, rel = 0.01 }");  // the larger: 0.5, not 0.1
  CHECK(both.bound.tolerance() == doctest::Approx(0.5));
  CHECK(both.bound.holds(10.4));

  auto exact = read("{ equals = 0.5, abs = 0 }");  // exactness, asked for explicitly
  REQUIRE(exact.errors.empty());
  CHECK(exact.bound.holds(0.5));
  CHECK_FALSE(exact.bound.holds(std::nextafter(0.5, 1.0)));

  CHECK_FALSE(abs.bound.holds(std::nan("")));  // a value the run could not compute never passes
}

TEST_CASE("min, max and equals combine: every part must hold") {
  auto r = read("{ equals = 0.5, abs = 0.2, max = 0.6 }");
  REQUIRE(r.errors.empty());
  CHECK(r.bound.holds(0.55));
  CHECK_FALSE(r.bound.holds(0.65));  // within the tolerance, above max
  CHECK(r.bound.within_limits(0.1));
  CHECK_FALSE(r.bound.holds(0.1));   // within max, outside the tolerance
  CHECK(r.bound.describe() == "0.5 +/- 0.2, <= 0.6");

  auto limits = read("{ min = 0.97 }");
  CHECK(limits.bound.holds(0.97));
  CHECK_FALSE(limits.bound.holds(0.9699999));
  CHECK(limits.bound.describe() == ">= 0.97");
  CHECK(read("{ min = 0.1, max = 0.2 }").bound.describe() == "in [0.1, 0.2]");
  CHECK(read("{ equals = 0.1234, rel = 0.01 }").bound.describe() == "0.1234 +/- 1%");
  CHECK(read("{ equals = 0.1234, rel = 0.01, abs = 1e-3 }").bound.describe() == "0.1234 +/- max(0.001, 1%)");
}

TEST_CASE("equals without a tolerance is a recipe error at the value, with the fix") {
  auto r = read("{ equals = 0.1234 }");
  REQUIRE(r.errors.size() == 1);
  CHECK(r.errors[0].rfind("r.toml:2:27: expect.valid/loss.equals: equals needs a tolerance: add abs = ... and/or rel = ...", 0) == 0);
  CHECK(r.errors[0].find("{ equals = 0.1234, rel = 0.01 }") != std::string::npos);
}

TEST_CASE("an unknown key in a bound is a recipe error with the nearest valid key") {
  auto r = read("{ equals = 0.5, abss = 1e-3 }");
  // Two problems, both reported: the typo, and equals left without its tolerance.
  REQUIRE(r.errors.size() == 2);
  CHECK(r.errors[0].rfind("r.toml:2:39: expect.valid/loss.abss: unknown key (did you mean \"abs\"?", 0) == 0);
  CHECK(r.errors[0].find("valid keys: min, max, equals, abs, rel") != std::string::npos);
  CHECK(r.errors[1].find("equals needs a tolerance") != std::string::npos);
}

TEST_CASE("a tolerance without equals, min above max and an empty bound are recipe errors") {
  auto tol = read("{ min = 0.1, rel = 0.01 }");
  REQUIRE(tol.errors.size() == 1);
  CHECK(tol.errors[0].find("expect.valid/loss.rel: rel is a tolerance around equals, and there is no equals") !=
        std::string::npos);

  auto swapped = read("{ min = 0.9, max = 0.1 }");
  REQUIRE(swapped.errors.size() == 1);
  CHECK(swapped.errors[0].find("min 0.9 > max 0.1: no value can pass") != std::string::npos);

  auto empty = read("{}");
  REQUIRE(empty.errors.size() == 1);
  CHECK(empty.errors[0].rfind("r.toml:2:16: expect.valid/loss: expected a bound", 0) == 0);

  auto negative = read("{ equals = 1, abs = -0.1 }");
  REQUIRE_FALSE(negative.errors.empty());
  CHECK(negative.errors[0].find("expect.valid/loss.abs: value -0.1 is out of range") != std::string::npos);
}

TEST_CASE("a recorded baseline is short when the tolerance allows it and exact when it is 0") {
  const double loss = 0.23456789012345678;
  std::string loose = baseline_text(loss, 1e-3);
  CHECK(loose == "0.234568");  // 6 significant digits: 2e-7 off, far inside a thousandth of 1e-3
  std::string tight = baseline_text(loss, 1e-9);
  CHECK(std::fabs(std::strtod(tight.c_str(), nullptr) - loss) <= 1e-12);
  CHECK(tight.size() < std::string("0.23456789012345678").size());
  CHECK(std::strtod(baseline_text(loss, 0).c_str(), nullptr) == loss);  // exact round trip
  CHECK(baseline_text(5, 0.1) == "5.0");  // a float in TOML, not the integer 5
  CHECK(baseline_text(0.875, 0) == "0.875");
}
