#pragma once
// How many CPU threads a process may use, and telling every thread pool in the process.

namespace engine {

/// Cores this process may run on: its CPU affinity (a container's cpuset, `taskset`, a batch
/// scheduler's binding), not the machine's count. Used by the launcher, the automatic layout and
/// the accelerator's per-process thread count, so that all three divide the same cores.
int usable_cores();

/// Sets the intra-op thread count of the BLAS library LibTorch was linked against, when it is
/// OpenBLAS (Debian's `libopenblas0-pthread`; looked up at run time, nothing to link). OpenBLAS
/// starts its own pool of one thread per core when it is loaded, independent of
/// torch::set_num_threads; after each multi-threaded call its idle threads spin on sched_yield for
/// ~0.1 s. Measured here (perf, 1 process x 1 thread, convnext_atto): one such thread burnt 2.9 s
/// of CPU in a 15 s run, time that a second DDP rank on the same cores needs. With n = 1 BLAS calls
/// run on the calling thread and the pool sleeps. Returns false when no OpenBLAS is loaded
/// (reference BLAS, MKL, Accelerate: nothing to do). A user's OPENBLAS_NUM_THREADS wins.
bool set_blas_threads(int n);

/// True when the BLAS in this process is OpenBLAS (an optimised GEMM), false for the reference
/// BLAS or an unknown one. Models route matrix products through BLAS only when it is optimised:
/// Debian's reference BLAS runs ~6 GFLOP/s, 20-50x below OpenBLAS or oneDNN.
bool optimized_blas();

}  // namespace engine
