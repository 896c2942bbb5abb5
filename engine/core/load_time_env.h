#pragma once
// The environment that runtimes read once, when they are loaded, and that the engine sets before
// they are: build/engine (engine/entry.cpp) sets it and executes engine-core; engine-core or an
// example started directly sets it and executes itself again. Only the C library: entry.cpp links
// nothing else. A user's own value of any of these variables wins.
//
// - OMP_WAIT_POLICY=PASSIVE: LibTorch's OpenMP threads otherwise spin between parallel regions and
//   starve the loader threads on a busy CPU (2 busy cores, convnext_atto: 19 against 256 img/s).
// - OPENBLAS_THREAD_TIMEOUT=4: an idle OpenBLAS worker otherwise calls sched_yield for 2^28 cycles
//   (~0.1 s) after every multi-threaded product before it sleeps, a system call each time, on the
//   core the other threads need. 4 (2^4 cycles, OpenBLAS's smallest) makes it sleep at once. Measured
//   on a 2-core Zen 5, resnet34 pretrain recipe at 1 process x 2 threads, 2 alternating rounds:
//   sys 18.4 / 17.2 -> 7.4 / 7.3 s, wall 31.0 / 29.6 -> 29.0 / 27.9 s (bench/RESULTS.md).
#include <cstdlib>

namespace engine {

/// Sets each load-time variable above that the environment lacks. Returns true when it set one:
/// a process that has already loaded the runtimes must execute itself again for them to see it.
inline bool set_load_time_env() {
  struct Default {
    const char* name;
    const char* value;
  };
  static constexpr Default kDefaults[] = {{"OMP_WAIT_POLICY", "PASSIVE"}, {"OPENBLAS_THREAD_TIMEOUT", "4"}};
  bool set = false;
  for (const Default& d : kDefaults)
    if (!std::getenv(d.name)) {
      setenv(d.name, d.value, 1);
      set = true;
    }
  return set;
}

}  // namespace engine
