#include "engine/core/cpu_threads.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace engine {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool optimized_blas() {
  static const bool found = dlsym(RTLD_DEFAULT, "openblas_set_num_threads") != nullptr;
  return found;
}

bool set_blas_threads(int n) {
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS"); env && *env) return false;
  using SetThreads = void (*)(int);
  auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (!fn) return false;
  fn(std::max(1, n));
  return true;
}

}  // namespace engine
