// The core's arithmetic peaks, one thread: float32 FMA (vfmadd231ps, in zmm registers where the
// CPU has AVX-512F, else in ymm with AVX2 + FMA) and, where the CPU has AVX512-BF16, the bf16 dot
// product (vdpbf16ps: 32 products summed pairwise into 16 floats), each as independent accumulator
// chains (24 in zmm, 12 in ymm: AVX2 has 16 registers). A ceiling for goal 4's fractions that no
// memory or library choice can change: whether a bf16 GEMM could ever beat float32 here.
// Build: `ninja -C build bench_isa_peak`; run: `build/bench_isa_peak`. Best of 5 runs of 2e8
// instructions each; x86-64 with AVX2 + FMA at least.
#include <chrono>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// `name()`: GFLOP/s of `chains` independent accumulator chains of type Acc (a = UPDATE, written in
// terms of the accumulator `a` and the operands `x` and `y`; `flops` per update), 2e8 updates in
// all. `x` is taken as changed every round, so that the loop is not folded. A macro, not a
// template: the intrinsics need the function's own target attribute.
#define ENGINE_CHAINS_GFLOPS(name, isa, Acc, chains, zero, Operand, x0, y0, UPDATE, flops) \
  __attribute__((target(isa))) double name() {                                             \
    constexpr long iters = 200000000L / (chains);                                          \
    Acc acc[chains];                                                                       \
    for (auto& a : acc) a = zero;                                                          \
    Operand x = x0;                                                                        \
    const Operand y = y0;                                                                  \
    const auto t0 = std::chrono::steady_clock::now();                                      \
    for (long it = 0; it < iters; ++it) {                                                  \
      _Pragma("GCC unroll 24") for (auto& a : acc) a = (UPDATE);                           \
      asm volatile("" : "+v"(x));                                                          \
    }                                                                                      \
    const double s = seconds_since(t0);                                                    \
    float lanes[sizeof(acc) / sizeof(float)], sink = 0;                                    \
    std::memcpy(lanes, acc, sizeof(acc));                                                  \
    for (float v : lanes) sink += v;                                                       \
    asm volatile("" ::"r"(sink));                                                          \
    return iters * (chains) * (flops) / s / 1e9;                                           \
  }

// float32 FMA in zmm registers: 24 chains, 32 FLOPs per instruction.
ENGINE_CHAINS_GFLOPS(fma_gflops, "avx512f", __m512, 24, _mm512_setzero_ps(), __m512, _mm512_set1_ps(1.0f),
                     _mm512_set1_ps(1e-9f), _mm512_fmadd_ps(x, y, a), 32.0)
// The same in ymm on AVX2 + FMA CPUs: 12 chains (16 registers), 16 FLOPs per instruction.
ENGINE_CHAINS_GFLOPS(fma_gflops_ymm, "avx2,fma", __m256, 12, _mm256_setzero_ps(), __m256, _mm256_set1_ps(1.0f),
                     _mm256_set1_ps(1e-9f), _mm256_fmadd_ps(x, y, a), 16.0)
// vdpbf16ps: 32 bf16 products summed pairwise into 16 floats, 64 FLOPs per instruction; 24 chains.
ENGINE_CHAINS_GFLOPS(bf16_dot_gflops, "avx512f,avx512bf16", __m512, 24, _mm512_setzero_ps(), __m512bh,
                     (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3f80),
                     _mm512_dpbf16_ps(a, x, y), 64.0)
#undef ENGINE_CHAINS_GFLOPS

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
