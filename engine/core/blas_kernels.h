#pragma once
// Which of OpenBLAS's kernel families this process runs, and correcting OpenBLAS's choice where it
// does not know the CPU.
//
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it is loaded it picks one kernel family (a
// "core": Prescott, Haswell, SkylakeX, Zen, ...) from the CPU's model number. A model it does not
// know falls back to its oldest x86-64 kernels. Measured: OpenBLAS 0.3.21 (Debian 12) on a 2-core
// Intel Xeon of family 6 model 207 (Emerald Rapids, AVX-512 and AVX512-BF16) chose "Prescott"
// (SSE3): sgemm 32.5 GFLOP/s at 1 thread, against 155.8 with its SkylakeX kernels on the same core
// (OPENBLAS_CORETYPE=SkylakeX), and convnext_atto trained at 310 vs 770-820 img/s.
#include <string>

namespace engine {

/// The instruction sets that decide which OpenBLAS kernels a CPU can run.
struct CpuIsa {
  bool avx2_fma = false;  ///< AVX2 and FMA3 (OpenBLAS's Haswell / Zen kernels)
  bool avx512 = false;    ///< AVX-512 F, CD, BW, DQ and VL, enabled by the OS (its SkylakeX kernels)
};

/// This CPU's, from cpuid (the compiler's runtime checks, which include the OS's XSAVE state).
CpuIsa cpu_isa();

/// The OpenBLAS core whose kernels `isa` supports beyond those of `chosen` (OpenBLAS's name for
/// the family it picked, any case): "SkylakeX" when the CPU has AVX-512 and `chosen` is not an
/// AVX-512 family, "Haswell" when it has AVX2 + FMA and `chosen` predates AVX2; "" otherwise.
std::string better_openblas_core(const std::string& chosen, const CpuIsa& isa);

/// What select_blas_kernels() found and did.
struct BlasKernels {
  std::string library;        ///< "OpenBLAS 0.3.21", or "" when no OpenBLAS is loaded
  std::string openblas_core;  ///< the family OpenBLAS picked when it was loaded (OPENBLAS_CORETYPE's, where set)
  std::string core;           ///< the family in use now
  std::string forced;         ///< OPENBLAS_CORETYPE as the environment set it ("" when unset)
  bool switched() const { return core != openblas_core; }
};

/// Once per process, before any BLAS call (main() does it first thing): when this CPU's instruction
/// sets run newer kernels than the family OpenBLAS picked (better_openblas_core), switches to them by
/// OpenBLAS's own mechanism (its OPENBLAS_CORETYPE, read by a re-initialisation of its dispatch
/// table), as OpenBLAS's later releases do for AVX-512 CPUs they know (Zen 4 and 5 as SkylakeX /
/// Cooperlake). Decided by instruction set alone, never by a timing: families round differently, and
/// a timing taken on a shared machine decided differently from one run to the next. The same where
/// OPENBLAS_CORETYPE in the environment names an older family than this CPU runs: a machine image
/// may set it for every program (one Zen 5 VM here: OPENBLAS_CORETYPE=Haswell, sgemm 99 vs 196
/// GFLOP/s with SkylakeX's kernels, resnet34's evaluation 1.4x slower); a family as new as the CPU
/// runs stays as set. Leaves everything as it is when ENGINE_BLAS_KERNELS=0, when the BLAS is not
/// an OpenBLAS built with DYNAMIC_ARCH, or when nothing better is available.
const BlasKernels& select_blas_kernels();

/// The work of select_blas_kernels(), done on each call (tests; select_blas_kernels() keeps the
/// first result).
BlasKernels choose_blas_kernels();

/// One line for the run header when select_blas_kernels() replaced OpenBLAS's choice (or the
/// environment's OPENBLAS_CORETYPE); "" otherwise.
std::string blas_kernels_note();
/// The same line for `k` (a choose_blas_kernels() result).
std::string blas_kernels_note(const BlasKernels& k);

/// Makes OpenBLAS use the kernel family `core` (any case) from now on. Returns false, with
/// OpenBLAS's family unchanged, when it has no such family or cannot switch (no DYNAMIC_ARCH).
/// Not thread-safe: no BLAS call may run meanwhile.
bool use_openblas_core(const std::string& core);

/// The kernel family OpenBLAS runs now ("" when no OpenBLAS is loaded).
std::string openblas_core();

}  // namespace engine
