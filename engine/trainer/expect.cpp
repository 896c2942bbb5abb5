#include "engine/trainer/expect.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "engine/core/text.h"
#include "engine/recipe/options.h"

namespace engine {

namespace {

// The shortest text that reads back as exactly `v`: how a value the user wrote is shown again.
std::string shortest(double v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string significant(double v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, v);
  return buf;
}

}  // namespace

Bound Bound::read(Options& t) {
  static const std::vector<std::string> keys{"min", "max", "equals", "abs", "rel"};
  Bound b;
  b.where = t.where();
  // The table is open-ended for RecipeDocument::finish() (it only knows keys that were read, and
  // absent keys are never read), so unknown keys are reported here against the full key list.
  for (const auto& k : t.keys())
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      t.error(k, "unknown key", did_you_mean(k, keys, "valid keys: "));
  t.ignore_unread();
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr double big = std::numeric_limits<double>::max();
  // Every part is optional (nan = unset when `engine list recipe` describes them).
  auto get = [&](const char* k, const char* doc, double lo, double hi) -> std::optional<double> {
    if (!t.describing() && !t.has(k)) return std::nullopt;
    return t.number(k, std::nan(""), doc, lo, hi);
  };
  b.min = get("min", "optional: the value must be >= min", -inf, inf);
  b.max = get("max", "optional: the value must be <= max", -inf, inf);
  b.equals = get("equals", "optional: a recorded baseline (`engine test --record` rewrites it); needs abs and/or rel", -big, big);
  b.abs = get("abs", "tolerance around equals: passes when |value - equals| <= max(abs, rel * |equals|)", 0, inf);
  b.rel = get("rel", "tolerance around equals, a fraction of |equals| (0.01 = 1%)", 0, inf);
  b.equals_at = t.where("equals");
  if (t.describing()) return Bound{};

  if (!b.min && !b.max && !b.equals && !b.abs && !b.rel)
    t.error("", "expected a bound: { min = ..., max = ... } or { equals = ..., abs = ..., rel = ... }",
            "e.g. { min = 0.97 } or { equals = 0.1234, rel = 0.01 }");
  if (b.equals && !b.abs && !b.rel)
    t.error("equals", "equals needs a tolerance: add abs = ... and/or rel = ...",
            "e.g. { equals = " + shortest(*b.equals) + ", rel = 0.01 } passes within 1%; abs = 0 asks for an exact match");
  for (const char* k : {"abs", "rel"})
    if (!b.equals && t.has(k))
      t.error(k, std::string(k) + " is a tolerance around equals, and there is no equals",
              "add equals = ... (`engine test --record` fills it in), or use min/max for a threshold");
  if (b.min && b.max && *b.min > *b.max)
    t.error("min", "min " + shortest(*b.min) + " > max " + shortest(*b.max) + ": no value can pass",
            "swap them");
  return b;
}

double Bound::tolerance() const {
  if (!equals) return 0;
  return std::max(abs.value_or(0), rel.value_or(0) * std::fabs(*equals));
}

bool Bound::within_limits(double got) const {
  if (std::isnan(got)) return false;
  return (!min || got >= *min) && (!max || got <= *max);
}

bool Bound::holds(double got) const {
  if (!within_limits(got)) return false;
  return !equals || std::fabs(got - *equals) <= tolerance();
}

std::string Bound::describe() const {
  std::vector<std::string> parts;
  if (equals) {
    std::string tol;
    std::string r = rel ? format_number(*rel * 100) + "%" : "";
    if (abs && rel) tol = "max(" + format_number(*abs) + ", " + r + ")";
    else tol = abs ? format_number(*abs) : r;
    parts.push_back(shortest(*equals) + " +/- " + tol);
  }
  if (min && max) parts.push_back("in [" + shortest(*min) + ", " + shortest(*max) + "]");
  else if (min) parts.push_back(">= " + shortest(*min));
  else if (max) parts.push_back("<= " + shortest(*max));
  return join(parts);
}

std::string baseline_text(double value, double tolerance) {
  std::string text = shortest(value);
  if (tolerance > 0 && std::isfinite(value)) {
    for (int digits = 6; digits < 17; ++digits) {
      std::string s = significant(value, digits);
      if (std::fabs(std::strtod(s.c_str(), nullptr) - value) <= tolerance / 1000) {
        text = s;
        break;
      }
    }
  }
  // "5" would read back as a TOML integer; the baseline is a float.
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
  return text;
}

}  // namespace engine
