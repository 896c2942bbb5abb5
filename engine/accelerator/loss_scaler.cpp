#include "engine/accelerator/loss_scaler.h"

namespace engine {

LossScaler::LossScaler(LossScalerOptions options, bool enabled)
    : opts_(options), enabled_(enabled), scale_(options.init_scale) {}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_ : loss;
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) const {
  bool finite = true;
  const double inv = 1.0 / scale_;
  for (const auto& p : params) {
    auto g = p.grad();
    if (!g.defined()) continue;
    if (enabled_) g.mul_(inv);
    // One reduction per tensor; isfinite().all() catches +-inf and NaN alike.
    if (finite && !torch::isfinite(g).all().item<bool>()) finite = false;
  }
  return finite;
}

void LossScaler::update(bool found_inf) {
  if (!enabled_) return;
  if (found_inf) {
    scale_ *= opts_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= opts_.growth_interval) {
    scale_ *= opts_.growth_factor;
    growth_tracker_ = 0;
  }
}

}  // namespace engine
