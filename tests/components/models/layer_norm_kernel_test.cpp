// The engine's LayerNorm kernel must agree with torch::layer_norm: outputs and every gradient,
// on real digit features, with channel counts that are and are not multiples of the vector width.
#include "components/models/layer_norm_kernel.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"

using namespace engine;
using test::rel_diff;

namespace {

std::vector<torch::Tensor> run(bool own, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                               const torch::Tensor& up) {
  auto x = x0.detach().requires_grad_(), w = w0.detach().requires_grad_(), b = b0.detach().requires_grad_();
  auto y = own ? layer_norm_last_dim(x, w, b, 1e-6) : torch::layer_norm(x, {x.size(-1)}, w, b, 1e-6);
  y.backward(up);
  return {y.detach(), x.grad(), w.grad(), b.grad()};
}

}  // namespace

TEST_CASE("layer_norm_last_dim matches torch::layer_norm on digit features, gradients included") {
  const auto digits = test::mnist_batch(16, 40);
  torch::manual_seed(1);
  for (int64_t c : {40, 80, 28, 3}) {
    CAPTURE(c);
    // Channels of a conv over real digits, as ConvNeXt's LayerNorm2d sees them: NHWC rows.
    auto conv = torch::randn({c, 1, 4, 4}) * 0.5;
    auto x = torch::conv2d(digits.images, conv, {}, 4).permute({0, 2, 3, 1}).contiguous();
    auto w = torch::randn({c}) * 0.5 + 1, b = torch::randn({c}) * 0.1;
    auto up = torch::randn_like(x);
    auto own = run(true, x, w, b, up), ref = run(false, x, w, b, up);
    for (int i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(rel_diff(own[i], ref[i]) < 2e-5);
    }
    CHECK(own[2].sizes() == w.sizes());
    // Without gradients: the same forward.
    torch::NoGradGuard g;
    CHECK(rel_diff(layer_norm_last_dim(x, w, b, 1e-6), ref[0]) < 2e-5);
  }
}

TEST_CASE("layer_norm_last_dim falls back to torch for strided, bf16 and double inputs") {
  const auto digits = test::mnist_batch(4, 28);
  auto x = digits.images.squeeze(1);  // [4, 28, 28]
  auto w = torch::ones({28}), b = torch::zeros({28});
  auto strided = x.transpose(1, 2);
  CHECK(torch::allclose(layer_norm_last_dim(strided, w, b, 1e-6), torch::layer_norm(strided, {28}, w, b, 1e-6)));
  auto d = x.to(torch::kDouble);
  CHECK(torch::equal(layer_norm_last_dim(d, w.to(torch::kDouble), b.to(torch::kDouble), 1e-6),
                     torch::layer_norm(d, {28}, w.to(torch::kDouble), b.to(torch::kDouble), 1e-6)));
  auto h = x.to(torch::kBFloat16);
  auto wh = w.to(torch::kBFloat16), bh = b.to(torch::kBFloat16);
  CHECK(torch::equal(layer_norm_last_dim(h, wh, bh, 1e-6), torch::layer_norm(h, {28}, wh, bh, 1e-6)));
}
