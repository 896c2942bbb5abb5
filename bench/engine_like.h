#pragma once
// What the single-process benchmarks (mlp_gemm.cpp, eval_forward.cpp) share: the process set up as
// an engine process is (intra-op and OpenBLAS threads, the allocator tuning, OpenBLAS's kernels for
// this CPU), and the median of a round's timings.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "engine/core/allocator.h"
#include "engine/core/blas_kernels.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/cpu_threads.h"

namespace bench {

/// One intra-op thread unless ENGINE_THREADS says otherwise; OpenBLAS at the same count; freed
/// buffers kept in the heap; OpenBLAS's kernels checked against the CPU (as engine main does).
inline void set_up_like_engine() {
  const char* threads = std::getenv("ENGINE_THREADS");
  at::set_num_threads(threads ? std::atoi(threads) : 1);
  engine::set_blas_threads(at::get_num_threads());
  engine::tune_allocator();
  engine::select_blas_kernels();
  engine::check_onednn_convs();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
