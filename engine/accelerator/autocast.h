#pragma once
// RAII autocast (LibTorch has no guard in 1.13 nor in 2.x). The forward pass and the loss run
// inside it; backward and the optimizer step run outside.
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace engine {

class AutocastGuard {
 public:
  /// enabled == false: no-op. dtype: at::kBFloat16 (CPU, CUDA) or at::kHalf (CUDA only).
  AutocastGuard(bool enabled, c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool enabled_;
  c10::DeviceType device_;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::Float;
};

}  // namespace engine
