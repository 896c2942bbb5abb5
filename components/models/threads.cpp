#include "components/models/threads.h"

#include <ATen/Parallel.h>

#include <mutex>
#include <set>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace engine {

int kernel_threads() {
  std::mutex mutex;
  std::set<std::thread::id> seen;
  at::parallel_for(0, at::get_num_threads(), 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    seen.insert(std::this_thread::get_id());
  });
  return static_cast<int>(seen.size());
}

OneThreadIf::OneThreadIf(bool serial) {
#if defined(_OPENMP)
  if (!serial || omp_in_parallel()) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1) return;
  omp_set_num_threads(1);
  restore_ = threads;
#else
  (void)serial;
#endif
}

OneThreadIf::~OneThreadIf() {
#if defined(_OPENMP)
  if (restore_) omp_set_num_threads(restore_);
#endif
}

}  // namespace engine
