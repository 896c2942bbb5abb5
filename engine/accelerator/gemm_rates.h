#pragma once
// How fast this process multiplies matrices in float32 and in bf16 on the CPU: whether bf16 mixed
// precision can pay here at all. On a 2-core Zen 4 oneDNN's bf16 GEMMs ran at 2x OpenBLAS's
// float32 (212 vs 102 GFLOP/s); on a 2-core Emerald Rapids without AMX at half of it (83 vs 156),
// where bf16 training measured 0.8x float32 (bench/RESULTS.md).
namespace engine {

struct GemmRates {
  double float32 = 0;  ///< GFLOP/s of torch::mm on float32 matrices (OpenBLAS where loaded)
  double bf16 = 0;     ///< the same on bf16 matrices (oneDNN where the CPU has avx512bw)
};

/// Times a 512 x 512 x 512 torch::mm in each dtype on the CPU at the process's current intra-op
/// threads (best of 3 after a warm-up; ~30 ms in all).
GemmRates measure_cpu_gemm_rates();

}  // namespace engine
