#pragma once
// Wall time for tests that bound how long a failure takes to be noticed (never speed assertions).
#include <chrono>

namespace engine::test {

/// Seconds on the steady clock since `t0`.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace engine::test
