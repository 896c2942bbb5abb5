#include "engine/accelerator/loss_scaler.h"

#include <ATen/ATen.h>

#include <map>
#include <tuple>
#include <utility>

namespace engine {

LossScaler::LossScaler(LossScalerOptions options, bool enabled)
    : opts_(options), enabled_(enabled), scale_(options.init_scale) {}

double LossScaler::scale() const { return on_device() ? scale_t_.item<double>() : scale_; }

int64_t LossScaler::growth_tracker() const { return on_device() ? growth_t_.item<int64_t>() : growth_tracker_; }

void LossScaler::set_state(double scale, int64_t growth_tracker) {
  scale_ = scale;
  growth_tracker_ = growth_tracker;
  if (on_device()) {
    scale_t_.fill_(scale);
    growth_t_.fill_(growth_tracker);
  }
}

void LossScaler::state_to(const torch::Device& device) {
  if (on_device()) return;
  auto on = torch::TensorOptions().device(device);
  scale_t_ = torch::full({1}, scale_, on.dtype(torch::kFloat));
  growth_t_ = torch::full({1}, growth_tracker_, on.dtype(torch::kInt));
}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  if (!enabled_) return loss;
  // On the device the scale stays there (no sync); as GradScaler, the product is float32.
  if (on_device() && loss.device() == scale_t_.device()) return loss * scale_t_.view({});
  return loss * scale();
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) {
  // The fused kernel wants one device per call; grouping by dtype too keeps it on its fast path
  // (mixed dtypes fall back to one launch per tensor inside ATen).
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> cuda_groups;  // (device index, dtype)
  std::vector<torch::Tensor> plain_grads;  // CPU (or a disabled scaler's): plain ops
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (!g.defined()) continue;
    if (enabled_ && g.is_cuda()) {
      cuda_groups[{g.device().index(), static_cast<int>(g.scalar_type())}].push_back(g);
    } else {
      plain_grads.push_back(g);
    }
  }

  // Each entry: a float flag, non-zero when its group held an inf or NaN. Read back once at the end.
  std::vector<torch::Tensor> found;
  if (!cuda_groups.empty()) {
    state_to(cuda_groups.begin()->second.front().device());
    // GradScaler's inverse: reciprocal in double, then float32, which the kernel requires.
    torch::Tensor inv = scale_t_.to(torch::kDouble).reciprocal().to(torch::kFloat);
    for (auto& [key, grads] : cuda_groups) {
      const torch::Device dev = grads.front().device();
      torch::Tensor found_inf = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(dev));
      at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv.to(dev));
      found.push_back(found_inf);
    }
  }
  if (!plain_grads.empty()) {
    // Plain ops: LibTorch 1.13 has no CPU kernel for the fused ones. The multiplier is a float
    // computed as the fused path computes it, so both paths give the same bits.
    const float inv = static_cast<float>(1.0 / scale());
    std::vector<torch::Tensor> finite;
    finite.reserve(plain_grads.size());
    for (auto& g : plain_grads) {
      if (enabled_) g.mul_(inv);
      finite.push_back(torch::isfinite(g).all());
    }
    found.push_back(torch::stack(finite).logical_not().any().to(torch::kFloat));
  }
  if (found.empty()) return true;
  // The one sync of the step (one per device when gradients span several).
  bool any = false;
  for (const auto& f : found) any = any || f.item<float>() != 0.0f;
  return !any;
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (on_device()) {
    // A fill, not a copy from host memory: no sync, the kernel runs in stream order.
    torch::Tensor flag = torch::full({1}, found_inf ? 1.0 : 0.0, scale_t_.options());
    at::_amp_update_scale_(scale_t_, growth_t_, flag, opts_.growth_factor, opts_.backoff_factor,
                           opts_.growth_interval);
    return;
  }
  if (found_inf) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= opts_.growth_interval) {
    scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
}

}  // namespace engine
