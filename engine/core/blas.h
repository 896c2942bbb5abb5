#pragma once
// The process's BLAS sgemm, called directly: for GEMMs on strided runs of a tensor's memory that a
// torch op would first copy (or pay dispatch for, hundreds of times a step).
#include <cstdint>

namespace engine {

/// True when the process has an optimised BLAS (engine::optimized_blas()) whose Fortran `sgemm_`
/// can be called (looked up at run time: LibTorch loads it; nothing to link). Callers check it
/// before sgemm_rows and take a torch op otherwise.
bool blas_sgemm_available();

/// C = alpha * op(A) * op(B) + beta * C for row-major float matrices (ld: the row stride): C is
/// [m, n]; op(A) is [m, k] (stored [k, m] when trans_a), op(B) is [k, n] (stored [n, k] when
/// trans_b). Every size and leading dimension must fit BLAS's 32-bit ints. Requires
/// blas_sgemm_available().
void sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace engine
