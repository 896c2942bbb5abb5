// The GELU kernels must agree with the torch op they replace: outputs and every gradient.
#include "components/models/cpu_kernels.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"

using namespace engine;
using test::rel_diff;

TEST_CASE("gelu_exact matches torch::gelu and its gradient over the whole range") {
  torch::manual_seed(1);
  for (bool channels_last : {true, false}) {
    CAPTURE(channels_last);
    auto fmt = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    auto x0 = torch::randn({3, 13, 5, 7}) * 4;  // 1365 elements: a SIMD tail too
    x0.view(-1).slice(0, 0, 6).copy_(torch::tensor({0.f, -0.f, 30.f, -30.f, 1e-4f, -9.f}));
    x0 = x0.contiguous(fmt);
    auto up = torch::randn({3, 13, 5, 7}).contiguous(fmt);
    auto x = x0.detach().requires_grad_(), xr = x0.detach().requires_grad_();
    auto y = gelu_exact(x), yr = torch::gelu(xr);
    CHECK(rel_diff(y.detach(), yr.detach()) < 1e-6);
    y.backward(up);
    yr.backward(up);
    CHECK((x.grad() - xr.grad()).abs().max().item<double>() < 1e-6 * (1 + up.abs().max().item<double>()));
  }
}

TEST_CASE("gelu_exact on GEMM rows, strided and sliced inputs, and without gradients") {
  torch::manual_seed(2);
  auto base = torch::randn({97, 40}) * 3;  // 3880 elements: not a multiple of 16, a SIMD tail
  struct Case {
    const char* name;
    torch::Tensor x, up;
  };
  const Case cases[] = {
      {"dense rows", base, torch::randn({97, 40})},
      {"transposed, upstream gradient in another layout", base.t(), torch::randn({97, 40}).t().contiguous()},
      {"sliced (not dense)", base.slice(1, 3, 37), torch::randn({97, 34})},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto x = c.x.detach().requires_grad_(), xr = c.x.detach().requires_grad_();
    auto y = gelu_exact(x), yr = torch::gelu(xr);
    CHECK(y.sizes() == yr.sizes());
    CHECK(rel_diff(y.detach(), yr.detach()) < 1e-6);
    y.backward(c.up);
    yr.backward(c.up);
    CHECK((x.grad() - xr.grad()).abs().max().item<double>() < 1e-6 * (1 + c.up.abs().max().item<double>()));
  }
  torch::NoGradGuard g;  // inference: the same forward kernel
  CHECK(rel_diff(gelu_exact(base), torch::gelu(base)) < 1e-6);
  auto xd = base.to(torch::kDouble);  // other dtypes: torch::gelu itself
  CHECK(torch::equal(gelu_exact(xd), torch::gelu(xd)));
}

TEST_CASE("gelu_exact on bf16: the float GELU and its gradient rounded once to bf16, tails and NaN included") {
  torch::manual_seed(3);
  // 4,097 elements (a tail in every vector width) spanning the range, with the special values.
  auto xf = torch::randn({4097}) * 4;
  xf.slice(0, 0, 8).copy_(torch::tensor({0.f, -0.f, 30.f, -30.f, 1e-4f, -9.f, NAN, INFINITY}));
  auto x16 = xf.to(torch::kBFloat16);
  auto up16 = torch::randn({4097}).to(torch::kBFloat16);
  auto x = x16.detach().requires_grad_();
  auto y = gelu_exact(x);
  CHECK((y.scalar_type() == torch::kBFloat16));
  // Forward: within one bf16 step of torch's float GELU rounded to bf16 (our float kernel and torch's
  // differ by float rounding, which can move a value across a bf16 rounding boundary).
  auto want = torch::gelu(x16.to(torch::kFloat)).to(torch::kBFloat16);
  want[7] = INFINITY;  // gelu(inf) = inf: LibTorch 2.6's vectorised CPU GELU says NaN there (1.13: inf)
  auto finite = want.isfinite();
  CHECK(torch::equal(y.detach().isnan(), want.isnan()));
  auto step = want.to(torch::kDouble).abs() * (1.0 / 128) + 1e-6;  // one bf16 step, 1e-6 near zero
  CHECK(((y.detach().to(torch::kDouble) - want.to(torch::kDouble)).abs() <= step).masked_select(finite).all().item<bool>());
  CHECK((y[7].item<float>() == INFINITY));  // gelu(inf) = inf
  // Backward: exactly the float kernel's gradient (on the widened values) rounded once.
  auto xr = x16.to(torch::kFloat).detach().requires_grad_();
  auto yr = gelu_exact(xr);
  y.backward(up16);
  yr.backward(up16.to(torch::kFloat));
  CHECK((x.grad().scalar_type() == torch::kBFloat16));
  auto gwant = xr.grad().to(torch::kBFloat16);
  auto gfinite = ~gwant.isnan();
  CHECK(torch::equal(x.grad().masked_select(gfinite), gwant.masked_select(gfinite)));
  CHECK(torch::equal(x.grad().isnan(), gwant.isnan()));
  torch::NoGradGuard g;  // inference: the same forward kernel
  CHECK(torch::equal(gelu_exact(x16).masked_select(finite), y.detach().masked_select(finite)));
}

TEST_CASE("gelu_exact against the float64 GELU on a dense grid: every interval of the AVX-512 tables, or the formula") {
  // 400,001 points on [-10, 10]: each of the tables' 32 intervals per sign (gelu_tables.h) and the
  // flat tails, value and slope, within a few float steps of the exact function. Without the tables
  // (AVX2, or a Clang build) the exp + erfc formula runs: LibTorch's own float GELU errs by 1.6e-7
  // (value) and 2.6e-7 (slope) on this grid, the formula by 1.0e-7 and 2.6e-7.
  auto x = torch::linspace(-10, 10, 400001).requires_grad_();
  auto y = gelu_exact(x);
  y.backward(torch::ones_like(y));
  auto xd = x.detach().to(torch::kDouble);
  auto cdf = 0.5 * torch::erfc(-xd / std::sqrt(2.0));
  auto pdf = torch::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
  auto scale = xd.abs().clamp_min(1.0);
  const double value_err = ((y.detach().to(torch::kDouble) - xd * cdf).abs() / scale).max().item<double>();
  const double slope_err = (x.grad().to(torch::kDouble) - (cdf + xd * pdf)).abs().max().item<double>();
  MESSAGE(std::string(gelu_uses_tables() ? "tables" : "formula")
          << ": largest error: value " << value_err << " (relative to max(1, |x|)), slope " << slope_err);
  CHECK(value_err < 2e-7);
  CHECK(slope_err < (gelu_uses_tables() ? 2e-7 : 3e-7));
}
