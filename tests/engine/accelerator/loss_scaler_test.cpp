#include "engine/accelerator/loss_scaler.h"

#include <doctest/doctest.h>

#include <torch/torch.h>

using namespace engine;

namespace {
torch::Tensor param_with_grad(std::vector<float> g) {
  auto p = torch::zeros({static_cast<int64_t>(g.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(g);
  return p;
}
}  // namespace

TEST_CASE("loss scaler: overflow skips and halves, clean steps grow after the interval") {
  LossScaler s(LossScalerOptions{65536.0, 2.0, 0.5, 3});
  CHECK(s.scale() == 65536.0);
  auto loss = torch::tensor(2.0f);
  CHECK(s.scale_loss(loss).item<float>() == 131072.0f);

  auto p = param_with_grad({65536.0f, -131072.0f});
  CHECK(s.unscale_and_check({p}));
  CHECK(torch::allclose(p.grad(), torch::tensor({1.0f, -2.0f})));

  auto inf = param_with_grad({1.0f, std::numeric_limits<float>::infinity()});
  auto nan = param_with_grad({std::numeric_limits<float>::quiet_NaN()});
  CHECK_FALSE(s.unscale_and_check({p, inf}));
  CHECK_FALSE(s.unscale_and_check({nan}));
  s.update(true);
  CHECK(s.scale() == 32768.0);
  CHECK(s.growth_tracker() == 0);
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 32768.0);
  s.update(false);  // third clean step in a row: grow
  CHECK(s.scale() == 65536.0);
  CHECK(s.growth_tracker() == 0);
  s.update(false);
  s.update(true);  // an overflow resets the streak
  CHECK(s.growth_tracker() == 0);
  CHECK(s.scale() == 32768.0);
}

TEST_CASE("a disabled scaler is the identity") {
  LossScaler s(LossScalerOptions{}, false);
  auto loss = torch::tensor(3.0f);
  CHECK(s.scale_loss(loss).item<float>() == 3.0f);
  auto p = param_with_grad({4.0f});
  CHECK(s.unscale_and_check({p}));
  CHECK(p.grad().item<float>() == 4.0f);
  s.update(true);
  CHECK(s.scale() == 65536.0);
}
