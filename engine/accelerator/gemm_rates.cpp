#include "engine/accelerator/gemm_rates.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

namespace engine {
namespace {

double mm_gflops(torch::ScalarType dtype) {
  constexpr int64_t n = 512;
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  auto c = torch::mm(a, b);  // warm-up: kernel selection, buffers
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

}  // namespace

GemmRates measure_cpu_gemm_rates() { return GemmRates{mm_gflops(torch::kFloat), mm_gflops(torch::kBFloat16)}; }

}  // namespace engine
