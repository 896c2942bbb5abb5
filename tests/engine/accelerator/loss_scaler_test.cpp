#include "engine/accelerator/loss_scaler.h"

#include <doctest/doctest.h>

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

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

namespace {

// What GradScaler does, written out on plain floats: the reference the scaler must match bit for bit.
struct ReferenceScaler {
  LossScalerOptions o;
  double scale = o.init_scale;
  int64_t tracker = 0;

  // Unscales `grads` in place; returns true when one of them holds an inf or NaN.
  bool unscale(std::vector<std::vector<float>>& grads) const {
    const float inv = static_cast<float>(1.0 / scale);
    bool found_inf = false;
    for (auto& g : grads) {
      for (float& v : g) {
        v = v * inv;
        found_inf = found_inf || !std::isfinite(v);
      }
    }
    return found_inf;
  }
  void update(bool found_inf) {
    if (found_inf) {
      scale *= o.backoff_factor;
      tracker = 0;
    } else if (++tracker == o.growth_interval) {
      scale *= o.growth_factor;
      tracker = 0;
    }
  }
};

// Same bits, NaN positions matching (a NaN's payload is not part of the contract).
bool same_bits(const torch::Tensor& got, const std::vector<float>& want) {
  torch::Tensor a = got.cpu().contiguous();
  torch::Tensor b = torch::tensor(want);
  torch::Tensor nan = torch::isnan(a);
  if (!torch::equal(nan, torch::isnan(b))) return false;
  return torch::equal(a.masked_fill(nan, 0).view(torch::kInt), b.masked_fill(nan, 0).view(torch::kInt));
}

// One training run's worth of scaled gradients: clean steps (a growth after 3), +inf, NaN and
// -inf overflows at different places, through three parameters of different sizes (1000 elements
// reach the vectorised kernels) and one without a gradient.
void run_sequence(const torch::Device& device) {
  const LossScalerOptions opts{1024.0, 2.0, 0.5, 3};
  LossScaler scaler(opts);
  ReferenceScaler ref{opts};
  const std::vector<int64_t> sizes{1000, 7, 1};
  std::vector<torch::Tensor> params;
  for (int64_t n : sizes) params.push_back(torch::zeros({n}, torch::dtype(torch::kFloat).device(device).requires_grad(true)));
  params.push_back(torch::zeros({3}, torch::dtype(torch::kFloat).device(device).requires_grad(true)));  // no grad

  enum Kind { clean, pos_inf, nan, neg_inf };
  const std::vector<Kind> steps{clean, clean, clean, clean, pos_inf, clean, nan, clean, clean,
                                clean, clean, neg_inf, clean, clean, clean, clean};
  // GradScaler's rule by hand, 1024 start, growth after 3 clean steps: the scale after each step.
  const std::vector<double> expected_scale{1024, 1024, 2048, 2048, 1024, 1024, 512, 512,
                                           512,  1024, 1024, 512,  512,  512,  1024, 1024};
  REQUIRE(expected_scale.size() == steps.size());
  for (size_t s = 0; s < steps.size(); ++s) {
    CAPTURE(s);
    // Gradients as backward() leaves them: true gradients (magnitudes 1e-4..1e2) times the scale.
    std::vector<std::vector<float>> grads;
    for (size_t t = 0; t < sizes.size(); ++t) {
      std::vector<float> g(sizes[t]);
      for (int64_t i = 0; i < sizes[t]; ++i) {
        const double truth = std::sin(0.37 * i + 1.3 * s + t) * std::pow(10.0, static_cast<double>(i % 7) - 4);
        g[i] = static_cast<float>(truth * ref.scale);
      }
      grads.push_back(g);
    }
    if (steps[s] == pos_inf) grads[0][517] = std::numeric_limits<float>::infinity();
    if (steps[s] == nan) grads[2][0] = std::numeric_limits<float>::quiet_NaN();
    if (steps[s] == neg_inf) grads[1][3] = -std::numeric_limits<float>::infinity();
    for (size_t t = 0; t < sizes.size(); ++t) params[t].mutable_grad() = torch::tensor(grads[t]).to(device);

    auto loss = torch::tensor(0.75f).to(device);
    CHECK(scaler.scale_loss(loss).item<float>() == static_cast<float>(0.75 * ref.scale));

    const bool ref_found_inf = ref.unscale(grads);
    const bool finite = scaler.unscale_and_check(params);
    CHECK(finite == !ref_found_inf);
    CHECK(finite == (steps[s] == clean));
    for (size_t t = 0; t < sizes.size(); ++t) CHECK(same_bits(params[t].grad(), grads[t]));
    CHECK_FALSE(params.back().grad().defined());

    ref.update(ref_found_inf);
    scaler.update(!finite);
    CHECK(scaler.scale() == ref.scale);
    CHECK(scaler.growth_tracker() == ref.tracker);
    CHECK(ref.scale == expected_scale[s]);
  }
}

}  // namespace

TEST_CASE("loss scaler: unscaled gradients and scale sequence match GradScaler's rule bit for bit (CPU)") {
  run_sequence(torch::kCPU);
}

TEST_CASE("loss scaler: the fused CUDA kernels match the same reference bit for bit") {
  if (!torch::cuda::is_available()) {
    MESSAGE("no CUDA device: the fused path (_amp_foreach_non_finite_check_and_unscale_) is not exercised here");
    return;
  }
  run_sequence(torch::Device(torch::kCUDA, 0));
}
