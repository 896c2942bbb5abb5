// The engine's depthwise convolution must agree with torch::conv2d: output and every gradient, on every
// geometry ConvNeXt meets (maps smaller than the kernel included), and give the same bits at any
// number of threads.
#include "components/models/depthwise_conv.h"

#include <ATen/Parallel.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/threads.h"

using namespace engine;
using test::rel_diff;
using test::same_bits;

namespace {

// Output and gradients (input, weight, bias) for a fixed upstream gradient: the engine's convolution
// (fast) or torch::conv2d.
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
  // Widths: 16-lane groups, an 8-lane rest (40 = 16 + 16 + 8), 8 alone; maps wider than a strip of 8,
  // odd widths (strips of 4, 2, 1), maps smaller than the kernel (the crop), 1x1; kernels 7, 5, 3;
  // NCHW-contiguous input; 12 channels (not a multiple of 8: torch's convolution).
  const Case cases[] = {{40, 14, 7, true}, {40, 14, 7, false}, {16, 7, 7, true}, {24, 3, 7, true},
                        {32, 2, 7, true},  {40, 1, 7, true},   {12, 9, 7, true}, {16, 6, 5, true},
                        {8, 5, 3, false},  {16, 1, 3, true},   {80, 5, 7, true}, {48, 10, 7, true}};
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

TEST_CASE("depthwise_conv2d_same on real digits at the shipped recipe's first stage: 40 channels, 10x10") {
  // 16 digits at 10x10 (the stem's output size for 40x40 input), each channel a differently scaled copy.
  auto x = (test::mnist_batch(16, 10, 40).images * torch::linspace(0.5, 1.5, 40).view({1, 40, 1, 1}))
               .contiguous(torch::MemoryFormat::ChannelsLast);
  torch::manual_seed(3);
  auto w = torch::randn({40, 1, 7, 7}) * 0.1, b = torch::randn({40}) * 0.1;
  auto up = torch::randn_like(x);
  auto fast = run_conv(true, x, w, b, up), ref = run_conv(false, x, w, b, up);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(rel_diff(fast[i], ref[i]) < 1e-5);
  }
  // Inference (no autograd) runs the same forward kernel.
  torch::NoGradGuard no_grad;
  CHECK(same_bits(depthwise_conv2d_same(x, w, b), fast[0]));
  CHECK(rel_diff(depthwise_conv2d_same(x, w, b), torch::conv2d(x, w, b, 1, 3, 1, 40)) < 1e-5);
}

TEST_CASE("depthwise_conv2d_same: the same bits at 1 and 2 threads, and zero gradient for taps that only see padding") {
  torch::manual_seed(4);
  const engine::test::IntraOpThreads threads(1);
  for (int64_t size : {10, 2}) {
    CAPTURE(size);
    auto x = torch::randn({20, 40, size, size}).contiguous(torch::MemoryFormat::ChannelsLast);  // 20: a short chunk
    auto w = torch::randn({40, 1, 7, 7}) * 0.1, b = torch::randn({40});
    auto up = torch::randn_like(x);
    threads.set(1);
    auto one = run_conv(true, x, w, b, up);
    threads.set(2);
    auto two = run_conv(true, x, w, b, up);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(same_bits(one[i], two[i]));
    }
    if (size == 2) {  // a 2x2 map reaches the central 3x3 taps only
      CHECK(one[2].slice(2, 0, 2).abs().max().item<float>() == 0.f);
      CHECK(one[2].slice(3, 5, 7).abs().max().item<float>() == 0.f);
      CHECK(one[2].slice(2, 2, 5).slice(3, 2, 5).abs().min().item<float>() > 0.f);
    }
  }
}

TEST_CASE("depthwise_conv2d_same without bias, and in bf16 and in double (torch's convolution)") {
  torch::manual_seed(5);
  auto x = torch::randn({2, 8, 5, 5}).contiguous(torch::MemoryFormat::ChannelsLast);
  auto w = torch::randn({8, 1, 7, 7});
  auto b = torch::randn({8});
  {
    auto xg = x.detach().requires_grad_(), wg = w.detach().requires_grad_();
    auto y = depthwise_conv2d_same(xg, wg, torch::Tensor());
    CHECK(rel_diff(y.detach(), torch::conv2d(x, w, {}, 1, 3, 1, 8)) < 1e-5);
    y.sum().backward();
    CHECK(xg.grad().defined());
    CHECK(wg.grad().defined());
  }
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
