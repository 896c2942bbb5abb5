// The core's arithmetic peaks, one thread: float32 FMA (vfmadd231ps, in zmm registers where the
// CPU has AVX-512F, else in ymm with AVX2 + FMA) and, where the CPU has AVX512-BF16, the bf16 dot
// product (vdpbf16ps: 32 products summed pairwise into 16 floats), each as independent accumulator
// chains (24 in zmm, 12 in ymm: AVX2 has 16 registers). A ceiling for goal 4's fractions that no
// memory or library choice can change: whether a bf16 GEMM could ever beat float32 here.
// Build: `ninja -C build bench_isa_peak`; run: `build/bench_isa_peak`. Best of 5 runs of 2e8
// instructions each; x86-64 with AVX2 + FMA at least.
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

// The same with 256-bit FMAs (16 FLOPs per instruction) on AVX2 + FMA CPUs.
__attribute__((target("avx2,fma"))) double fma_gflops_ymm() {
  constexpr int kYmmChains = 12;
  constexpr long kYmmIters = 200000000L / kYmmChains;
  __m256 acc[kYmmChains];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1.0f);
  const __m256 y = _mm256_set1_ps(1e-9f);
  const auto t0 = std::chrono::steady_clock::now();
  for (long it = 0; it < kYmmIters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kYmmChains; ++i) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
    asm volatile("" : "+v"(x));
  }
  const double s = seconds_since(t0);
  float lanes[8], sink = 0;
  for (auto& a : acc) {
    _mm256_storeu_ps(lanes, a);
    for (float v : lanes) sink += v;
  }
  asm volatile("" ::"r"(sink));
  return kYmmIters * kYmmChains * 16.0 / s / 1e9;
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
  const bool zmm = __builtin_cpu_supports("avx512f");
  if (!zmm && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::printf("neither AVX-512F nor AVX2 + FMA on this CPU\n");
    return 1;
  }
  const bool bf16 = zmm && __builtin_cpu_supports("avx512bf16");
  double fma = 0, dot = 0;
  for (int run = 0; run < 5; ++run) {  // alternating, best of each
    const double f = zmm ? fma_gflops() : fma_gflops_ymm();
    fma = f > fma ? f : fma;
    if (bf16) {
      const double d = bf16_dot_gflops();
      dot = d > dot ? d : dot;
    }
  }
  std::printf("float32 FMA (vfmadd231ps %s): %.1f GFLOP/s\n", zmm ? "zmm" : "ymm", fma);
  if (bf16)
    std::printf("bf16 dot product (vdpbf16ps zmm): %.1f GFLOP/s (%.2fx float32)\n", dot, dot / fma);
  else
    std::printf("bf16 dot product: no AVX512-BF16 on this CPU\n");
  return 0;
}
#else
int main() {
  std::printf("x86-64 only\n");
  return 1;
}
#endif
