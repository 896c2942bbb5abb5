// The fast CPU kernels must agree with the torch ops they replace: outputs and every gradient.
#include "components/models/cpu_kernels.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

using namespace engine;

namespace {

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / (1e-6 + b.abs().max().item<double>());
}

// Output and gradients (input, weight, bias) of f, for a fixed upstream gradient.
std::vector<torch::Tensor> run_conv(bool fast, const torch::Tensor& x0, const torch::Tensor& w0,
                                    const torch::Tensor& b0, const torch::Tensor& up) {
  auto x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
  const int64_t k = w.size(2);
  auto y = fast ? depthwise_conv2d_same(x, w, b) : torch::conv2d(x, w, b, 1, k / 2, 1, x.size(1));
  y.backward(up);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("depthwise_conv2d_same matches torch::conv2d, gradients included") {
  torch::manual_seed(0);
  struct Case {
    int64_t c, size, k;
    bool channels_last;
  };
  const Case cases[] = {{40, 14, 7, true}, {40, 14, 7, false}, {16, 7, 7, true}, {24, 3, 7, true},
                        {32, 2, 7, true},  {40, 1, 7, true},   {12, 9, 7, true}, {16, 6, 5, true},
                        {8, 5, 3, false},  {16, 1, 3, true}};
  for (const auto& c : cases) {
    CAPTURE(c.c);
    CAPTURE(c.size);
    CAPTURE(c.k);
    CAPTURE(c.channels_last);
    auto fmt = c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
    auto x = torch::randn({3, c.c, c.size, c.size + 1}).contiguous(fmt);
    auto w = (torch::randn({c.c, 1, c.k, c.k}) * 0.1).contiguous(fmt);
    auto b = torch::randn({c.c});
    auto up = torch::randn({3, c.c, c.size, c.size + 1}).contiguous(fmt);
    auto fast = run_conv(true, x, w, b, up), ref = run_conv(false, x, w, b, up);
    CHECK(rel_diff(fast[0], ref[0]) < 1e-5);
    CHECK(rel_diff(fast[1], ref[1]) < 1e-5);
    CHECK(rel_diff(fast[2], ref[2]) < 1e-5);
    CHECK(rel_diff(fast[3], ref[3]) < 1e-5);
    CHECK(fast[2].sizes() == w.sizes());
  }
}

TEST_CASE("depthwise_conv2d_same without gradients, in bf16 and in double falls back to conv2d") {
  auto x = torch::randn({2, 8, 5, 5});
  auto w = torch::randn({8, 1, 7, 7});
  auto b = torch::randn({8});
  {
    torch::NoGradGuard g;
    CHECK(rel_diff(depthwise_conv2d_same(x, w, b), torch::conv2d(x, w, b, 1, 3, 1, 8)) < 1e-5);
  }
  auto xd = x.to(torch::kDouble), wd = w.to(torch::kDouble), bd = b.to(torch::kDouble);
  CHECK(rel_diff(depthwise_conv2d_same(xd, wd, bd), torch::conv2d(xd, wd, bd, 1, 3, 1, 8)) < 1e-12);
  auto xb = x.to(torch::kBFloat16), wb = w.to(torch::kBFloat16), bb = b.to(torch::kBFloat16);
  auto yb = depthwise_conv2d_same(xb, wb, bb);
  CHECK((yb.scalar_type() == torch::kBFloat16));
  CHECK(rel_diff(yb.to(torch::kFloat), torch::conv2d(x, w, b, 1, 3, 1, 8)) < 0.05);
}

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
