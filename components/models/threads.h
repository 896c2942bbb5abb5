#pragma once
// How the engine's kernels and LibTorch's ops use the intra-op threads. No torch include: the
// guard is plain OpenMP (LibTorch's CPU parallelism where ATen says AT_PARALLEL_OPENMP, and what
// cmake/EngineOpenMP.cmake compiles the engine with).

#include <cstdint>

namespace engine {

/// The threads an at::parallel_for in the engine's own kernels runs on at the current intra-op
/// thread count: at::get_num_threads() where they were compiled with OpenMP like LibTorch
/// (cmake/EngineOpenMP.cmake), 1 where at::parallel_for's `#pragma omp parallel` was dropped.
int kernel_threads();

/// Below this many elements an elementwise or normalisation op (LibTorch's BatchNorm, ReLU and
/// its backward, a residual sum) runs faster on the calling thread alone than split over sleeping
/// intra-op threads: each of its parallel regions wakes them (a futex, and an IPI in a VM) and
/// waits for the last. A fixed size, not a timing taken at start: whether an op splits changes
/// the order of its sums, so a measured threshold would make two runs of a recipe differ. Measured
/// on a 2-core Zen 5 VM (LibTorch 1.13, channels-last, BatchNorm + ReLU forward and backward, 1 vs
/// 2 threads): 33k elements 89 vs 380 us, 200k 272 vs 412 us, 800k 1375 vs 1048 us (bench/RESULTS.md).
/// Maps of ImageNet-sized inputs (a resnet's 7x7 x 512 at batch 64: 1.6M) stay split.
constexpr int64_t kSplitMinElements = int64_t{1} << 19;

/// While alive, parallel regions opened on this thread (LibTorch's and the engine's) run on this
/// thread alone when `serial`; otherwise it does nothing. Other threads are not affected (the
/// OpenMP thread count is per thread). Cheaper than at::set_num_threads, which also resizes
/// LibTorch's pthreadpool and clears oneDNN's caches.
class OneThreadIf {
 public:
  explicit OneThreadIf(bool serial);
  ~OneThreadIf();
  OneThreadIf(const OneThreadIf&) = delete;
  OneThreadIf& operator=(const OneThreadIf&) = delete;

 private:
  int restore_ = 0;  // the thread count to put back; 0: nothing changed
};

}  // namespace engine
