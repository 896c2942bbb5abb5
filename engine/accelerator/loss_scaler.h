#pragma once
// Dynamic loss scaling for fp16 (torch.cuda.amp.GradScaler semantics, Accelerate's defaults):
// scale starts at 65536; a step whose unscaled gradients hold inf/NaN is skipped and the scale
// halves; after `growth_interval` clean steps in a row the scale doubles.
//
// One host sync per step: on CUDA gradients the fused ATen kernels unscale and check every tensor
// on the device (_amp_foreach_non_finite_check_and_unscale_) and update the scale there
// (_amp_update_scale_), as GradScaler does; unscale_and_check reads the one found-inf flag back.
// CPU gradients take plain tensor ops (LibTorch 1.13 has no CPU kernel for the fused ones) and
// also read their flags back once per step.
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
  /// The current scale. Once CUDA gradients were unscaled the scale lives on that device and this
  /// reads it back (a host sync): call it at checkpoints or in logs, not in the step loop.
  double scale() const;
  /// Clean steps since the last growth or overflow (a host sync once the state is on a device).
  int64_t growth_tracker() const;

  /// loss * scale (identity when disabled). No sync unless the state is on a device the loss is not on.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Divides every defined gradient by the scale in place (only checks them when disabled);
  /// returns true when all are finite. Gradients on a CUDA device: one fused kernel per device
  /// and dtype; on the CPU: plain ops. Either way the result is read back once.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  /// The state machine: found_inf -> scale *= backoff, tracker = 0; else tracker++ and
  /// scale *= growth when tracker reaches growth_interval. On the device once the state is there.
  void update(bool found_inf);

  /// For checkpoints: {scale, growth_tracker}.
  void set_state(double scale, int64_t growth_tracker);

 private:
  // Moves the state to `device` (float32 scale, int32 tracker: what the fused kernels take) the
  // first time CUDA gradients are seen; a no-op afterwards.
  void state_to(const torch::Device& device);
  bool on_device() const { return scale_t_.defined(); }

  LossScalerOptions opts_;
  bool enabled_;
  double scale_;              // authoritative while the state is on the host
  int64_t growth_tracker_ = 0;
  torch::Tensor scale_t_;     // [1] float32 on the gradients' CUDA device, once there
  torch::Tensor growth_t_;    // [1] int32, same device
};

}  // namespace engine
