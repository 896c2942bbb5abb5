#include "engine/core/cpu_threads.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <vector>

namespace engine {

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int pin_to_core_slice(int index, int count) {
  cpu_set_t allowed;
  if (count < 2 || index < 0 || index >= count || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  const int n = static_cast<int>(cores.size());
  if (n < count) return 0;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  const int first = index * n / count, end = (index + 1) * n / count;
  for (int i = first; i < end; ++i) CPU_SET(cores[i], &mine);
  return sched_setaffinity(0, sizeof mine, &mine) == 0 ? end - first : 0;
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
