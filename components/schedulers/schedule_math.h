#pragma once
// Small pure functions shared by the schedulers (header-only; no state, no torch).
#include <algorithm>
#include <cmath>
#include <cstdint>

namespace engine::sched {

/// pi, spelled out: M_PI is POSIX, not standard C++.
inline constexpr double kPi = 3.14159265358979323846;

/// fastai's SchedCos / _cos_anneal: start at pos 0, end at pos 1, half a cosine in between.
inline double cos_anneal(double start, double end, double pos) {
  return start + (1 + std::cos(kPi * (1 - pos))) * (end - start) / 2;
}

/// Linear warmup factor for 0-based `step` of `warmup` warmup steps: (step + 1) / warmup, so the
/// first step already trains (never lr 0) and step warmup - 1 reaches the full lr; 1 after.
inline double warmup_factor(int64_t step, int64_t warmup) {
  if (warmup <= 0 || step >= warmup) return 1.0;
  return static_cast<double>(std::max<int64_t>(step, 0) + 1) / static_cast<double>(warmup);
}

}  // namespace engine::sched
