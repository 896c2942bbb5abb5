// The engine's channels-last max pool must give torch::max_pool2d's output and input gradient bit for
// bit: on ReLU maps of real digits (whole windows of zeros: the tie rule decides where the gradient
// goes), with NaN and -inf in the map, on every window geometry the pool accepts, at any thread count.
#include "components/models/max_pool.h"

#include <ATen/Parallel.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <limits>

#include "tests/components/models/mnist_batch.h"
#include "tests/support/threads.h"

using namespace engine;

namespace {

// A ReLU feature map of real digits: `channels` random 3x3 filters over the first 6 digits at `size`,
// channels-last. The black background gives whole windows of zeros.
torch::Tensor relu_digits(int64_t channels, int64_t size) {
  torch::manual_seed(7);
  const torch::Tensor x = test::mnist_batch(6, size).images;
  const torch::Tensor w = torch::randn({channels, 1, 3, 3});
  return torch::relu(torch::conv2d(x, w, {}, 1, 1)).contiguous(torch::MemoryFormat::ChannelsLast);
}

// Output and input gradient (for a fixed upstream gradient) of the engine's pool or torch's.
std::pair<torch::Tensor, torch::Tensor> run_pool(bool engine_pool, const torch::Tensor& x0, int64_t k, int64_t s,
                                                 int64_t p) {
  torch::Tensor x = x0.detach().requires_grad_();
  torch::Tensor y = engine_pool ? max_pool2d_nhwc(x, k, s, p) : torch::max_pool2d(x, k, s, p);
  torch::manual_seed(3);
  y.backward(torch::randn(y.sizes()).contiguous(torch::MemoryFormat::ChannelsLast));
  return {y.detach(), x.grad()};
}

void check_same(const torch::Tensor& x, int64_t k, int64_t s, int64_t p) {
  CAPTURE(x.sizes());
  CAPTURE(k);
  CAPTURE(s);
  CAPTURE(p);
  const auto [y, gx] = run_pool(true, x, k, s, p);
  const auto [ty, tgx] = run_pool(false, x, k, s, p);
  REQUIRE(y.sizes() == ty.sizes());
  CHECK(y.is_contiguous(torch::MemoryFormat::ChannelsLast));
  // equal_nan: NaN in the map must come out as NaN where torch's does.
  CHECK(torch::allclose(y, ty, 0, 0, /*equal_nan=*/true));
  CHECK(torch::equal(gx, tgx));
  torch::NoGradGuard no_grad;  // the forward without indices
  CHECK(torch::allclose(max_pool2d_nhwc(x, k, s, p), ty, 0, 0, true));
}

}  // namespace

TEST_CASE("max_pool2d_nhwc matches torch::max_pool2d on ReLU maps of digits, ties and gradients included") {
  struct Case {
    int64_t channels, size, k, s, p;
  };
  // ResNet's stem pool (3 / 2, padding 1) on its 14x14 maps and odd ones; channel counts with 16-lane
  // groups, an 8- and 4-lane rest and a scalar rest (64, 40, 27, 3, 1); windows 2 / 2, 3 / 1, 5 / 2.
  for (const Case c : {Case{64, 14, 3, 2, 1}, Case{27, 13, 3, 2, 1}, Case{40, 7, 3, 2, 1}, Case{3, 5, 2, 2, 0},
                       Case{1, 9, 3, 1, 1}, Case{16, 28, 5, 2, 2}, Case{64, 2, 3, 2, 1}, Case{8, 1, 3, 2, 1}})
    check_same(relu_digits(c.channels, c.size), c.k, c.s, c.p);
}

TEST_CASE("max_pool2d_nhwc propagates NaN and keeps -inf as torch does") {
  torch::Tensor x = relu_digits(20, 10).clone();
  auto a = x.accessor<float, 4>();
  a[0][3][4][4] = std::numeric_limits<float>::quiet_NaN();
  a[1][0][0][0] = -std::numeric_limits<float>::infinity();
  a[2][19][9][9] = -std::numeric_limits<float>::infinity();
  x.narrow(0, 3, 1).fill_(-std::numeric_limits<float>::infinity());  // windows of -inf only
  check_same(x, 3, 2, 1);
}

TEST_CASE("max_pool2d_nhwc gives the same bits at 1 and 2 threads") {
  const torch::Tensor x = relu_digits(64, 14);
  const engine::test::IntraOpThreads threads(1);
  const auto one = run_pool(true, x, 3, 2, 1);
  threads.set(2);
  const auto two = run_pool(true, x, 3, 2, 1);
  CHECK(torch::equal(one.first, two.first));
  CHECK(torch::equal(one.second, two.second));
}

TEST_CASE("max_pool2d_nhwc leaves what it does not take to torch") {
  const torch::Tensor x = relu_digits(16, 9);
  // NCHW memory, a double map: torch's own results.
  CHECK(torch::equal(max_pool2d_nhwc(x.contiguous(), 3, 2, 1), torch::max_pool2d(x.contiguous(), 3, 2, 1)));
  const torch::Tensor xd = x.to(torch::kDouble);
  CHECK(torch::equal(max_pool2d_nhwc(xd, 3, 2, 1), torch::max_pool2d(xd, 3, 2, 1)));
  // Padding over half the window: torch's error, not a crash.
  CHECK_THROWS_AS(max_pool2d_nhwc(x, 2, 2, 2), c10::Error);
}
