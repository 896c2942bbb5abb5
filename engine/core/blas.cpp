#include "engine/core/blas.h"

#include <dlfcn.h>

#include <limits>
#include <stdexcept>

#include "engine/core/cpu_threads.h"

namespace engine {
namespace {

using Sgemm = void (*)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

Sgemm sgemm() {
  static const Sgemm fn = optimized_blas() ? reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "sgemm_")) : nullptr;
  return fn;
}

int blas_int(int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max()) throw std::invalid_argument("sgemm_rows: size out of BLAS's range");
  return static_cast<int>(v);
}

}  // namespace

bool blas_sgemm_available() { return sgemm() != nullptr; }

void sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  Sgemm fn = sgemm();
  if (!fn) throw std::logic_error("sgemm_rows: no optimised BLAS in this process");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same memory, operands swapped.
  const int im = blas_int(m), in = blas_int(n), ik = blas_int(k), ila = blas_int(lda), ilb = blas_int(ldb),
            ilc = blas_int(ldc);
  const char ta = trans_a ? 'T' : 'N', tb = trans_b ? 'T' : 'N';
  fn(&tb, &ta, &in, &im, &ik, &alpha, b, &ilb, a, &ila, &beta, c, &ilc);
}

}  // namespace engine
