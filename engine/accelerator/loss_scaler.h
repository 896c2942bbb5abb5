#pragma once
// Dynamic loss scaling for fp16 (torch.cuda.amp.GradScaler semantics, Accelerate's defaults):
// scale starts at 65536; a step whose unscaled gradients hold inf/NaN is skipped and the scale
// halves; after `growth_interval` clean steps in a row the scale doubles.
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace engine {

struct LossScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerOptions options = {}, bool enabled = true);

  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }

  /// loss * scale (identity when disabled).
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Divides every gradient by the scale in place; returns true when all are finite.
  /// Plain tensor ops, so it runs on CPU tensors with LibTorch 1.13 too (its fused
  /// _amp_foreach_non_finite_check_and_unscale_ is CUDA-only there).
  bool unscale_and_check(const std::vector<torch::Tensor>& params) const;
  /// The state machine: found_inf -> scale *= backoff, tracker = 0; else tracker++ and
  /// scale *= growth when tracker reaches growth_interval.
  void update(bool found_inf);

  /// For checkpoints: {scale, growth_tracker}.
  void set_state(double scale, int64_t growth_tracker) { scale_ = scale, growth_tracker_ = growth_tracker; }

 private:
  LossScalerOptions opts_;
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0;
};

}  // namespace engine
