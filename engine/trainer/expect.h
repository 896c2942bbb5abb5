#pragma once
// One bound of a recipe's [expect] table, the regression gate `engine test` checks:
//   "valid/accuracy" = { min = 0.97 }                          a threshold you choose
//   "valid/loss"     = { equals = 0.1234, abs = 1e-3 }          a recorded baseline and its tolerance
//   "valid/loss"     = { equals = 0.1234, rel = 0.01, max = 0.2 }   parts combine: every one must hold
// `equals` passes when |got - equals| <= max(abs, rel * |equals|). It needs a tolerance: a metric
// recomputed on another machine, thread count or library build differs in its last digits, so an
// implicit exact comparison would be a flaky gate; `abs = 0` asks for exactness explicitly.
#include <optional>
#include <string>

#include "engine/recipe/diagnostics.h"

namespace engine {

class Options;

struct Bound {
  std::optional<double> min, max;
  std::optional<double> equals, abs, rel;
  SourcePos where;      // the bound's { ... } table, for messages
  SourcePos equals_at;  // the `equals` value: what `engine test --record` rewrites

  /// Reads { min, max, equals, abs, rel } from the bound's table. Problems are recipe errors at
  /// file:line:col in the table's diagnostics: an unknown key (with the nearest valid one), a bound
  /// with no part, `equals` without `abs`/`rel`, a tolerance without `equals`, min > max.
  static Bound read(Options& table);

  /// The distance from `equals` that still passes: max(abs, rel * |equals|); 0 without equals.
  double tolerance() const;
  /// Whether min and max hold (true when neither is set); NaN never holds.
  bool within_limits(double got) const;
  /// Whether every part holds; NaN never holds.
  bool holds(double got) const;
  /// What is expected, as the test table prints it: ">= 0.97", "0.1234 +/- 0.001",
  /// "0.1234 +/- 1% (0.001234), <= 0.2".
  std::string describe() const;
};

/// The text `engine test --record` writes for a measured value: the fewest significant digits
/// (at least 6) that read back within a thousandth of `tolerance` of it, so that the baseline stays
/// readable and recording never eats into the tolerance; the exact shortest round-trip text when
/// `tolerance` is 0.
std::string baseline_text(double value, double tolerance);

}  // namespace engine
