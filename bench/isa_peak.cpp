// The core's arithmetic peaks, one thread: float32 FMA (vfmadd231ps) and, where the CPU has
// AVX512-BF16, the bf16 dot product (vdpbf16ps: 32 products summed pairwise into 16 floats), each
// as 24 independent accumulator chains in zmm registers. A ceiling for goal 4's fractions that
// no memory or library choice can change: whether a bf16 GEMM could ever beat float32 here.
// Build: `ninja -C build bench_isa_peak`; run: `build/bench_isa_peak`. Best of 5 runs of 2e8
// instructions each; x86-64 with AVX-512F only.
#include <chrono>
#include <cstdio>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace {

constexpr int kChains = 24;
constexpr long kIters = 200000000L / kChains;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// GFLOP/s of kChains independent FMA chains (2 FLOPs per lane per instruction).
__attribute__((target("avx512f"))) double fma_gflops() {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512 x = _mm512_set1_ps(1.0f);
  const __m512 y = _mm512_set1_ps(1e-9f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(x, y, acc[i]);
    asm volatile("" : "+v"(x));  // x is "changed": the loop is not folded
  }
  const double s = seconds_since(t0);
  float sink = 0;
  for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
  asm volatile("" ::"r"(sink));
  return kIters * kChains * 32.0 / s / 1e9;
}

// GFLOP/s of kChains independent vdpbf16ps chains (32 products and 32 adds per instruction).
__attribute__((target("avx512f,avx512bf16"))) double bf16_dot_gflops() {
  __m512 acc[kChains];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3f80);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kIters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    asm volatile("" : "+v"(x));
  }
  const double s = seconds_since(t0);
  float sink = 0;
  for (auto& a : acc) sink += _mm512_reduce_add_ps(a);
  asm volatile("" ::"r"(sink));
  return kIters * kChains * 64.0 / s / 1e9;
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx512f")) {
    std::printf("no AVX-512F on this CPU\n");
    return 1;
  }
  const bool bf16 = __builtin_cpu_supports("avx512bf16");
  double fma = 0, dot = 0;
  for (int run = 0; run < 5; ++run) {  // alternating, best of each
    const double f = fma_gflops();
    fma = f > fma ? f : fma;
    if (bf16) {
      const double d = bf16_dot_gflops();
      dot = d > dot ? d : dot;
    }
  }
  std::printf("float32 FMA (vfmadd231ps zmm): %.1f GFLOP/s\n", fma);
  if (bf16)
    std::printf("bf16 dot product (vdpbf16ps zmm): %.1f GFLOP/s (%.2fx float32)\n", dot, dot / fma);
  else
    std::printf("bf16 dot product: no AVX512-BF16 on this CPU\n");
  return 0;
}
#else
int main() {
  std::printf("x86-64 with AVX-512F only\n");
  return 1;
}
#endif
