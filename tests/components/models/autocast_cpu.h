#pragma once
// CPU autocast on for the guard's lifetime, for the model tests (test_models does not link the
// accelerator's AutocastGuard; this is the same switch, the API differing by LibTorch version).
#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace engine::test {

class AutocastCpu {
 public:
  explicit AutocastCpu(at::ScalarType dtype) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCPU);
    was_dtype_ = at::autocast::get_autocast_dtype(at::kCPU);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
    was_enabled_ = at::autocast::is_cpu_enabled();
    was_dtype_ = at::autocast::get_autocast_cpu_dtype();
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
#endif
    at::autocast::increment_nesting();
  }
  ~AutocastCpu() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCPU, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCPU, was_dtype_);
#else
    at::autocast::set_cpu_enabled(was_enabled_);
    at::autocast::set_autocast_cpu_dtype(was_dtype_);
#endif
  }
  AutocastCpu(const AutocastCpu&) = delete;
  AutocastCpu& operator=(const AutocastCpu&) = delete;

 private:
  bool was_enabled_;
  at::ScalarType was_dtype_;
};

}  // namespace engine::test
