#pragma once
// How many CPU threads a process may use, and telling every thread pool in the process.

namespace engine {

/// Cores this process may run on: its CPU affinity (a container's cpuset, `taskset`, a batch
/// scheduler's binding), not the machine's count. Used by the launcher, the automatic layout and
/// the accelerator's per-process thread count, so that all three divide the same cores.
int usable_cores();

/// Narrows this process's CPU affinity to slice `index` of `count` equal, contiguous slices of the
/// cores it may run on now (slice i: cores [i*n/count, (i+1)*n/count) of the n allowed, in order),
/// so that the ranks of one local job each keep their own cores: their caches stay warm and no
/// rank's compute thread is moved onto a core its peer is using. Threads started afterwards
/// (OpenMP, loaders, Gloo) inherit it. Returns the number of cores in the slice; does nothing and
/// returns 0 when count < 2, when there are fewer cores than slices, or when the affinity cannot be
/// read or set.
int pin_to_core_slice(int index, int count);

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
