#include "engine/accelerator/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace engine {

// 2.4 renamed the per-device autocast switches; the old names warn on every call there.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
static bool is_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
static void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
static c10::ScalarType get_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
static void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
static bool is_enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
static void set_enabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CPU) at::autocast::set_cpu_enabled(on);
  else at::autocast::set_enabled(on);
}
static c10::ScalarType get_dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
static void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::DeviceType::CPU) at::autocast::set_autocast_cpu_dtype(t);
  else at::autocast::set_autocast_gpu_dtype(t);
}
#endif

AutocastGuard::AutocastGuard(bool enabled, c10::DeviceType device, c10::ScalarType dtype)
    : enabled_(enabled), device_(device) {
  if (!enabled_) return;
  prev_enabled_ = is_enabled(device_);
  prev_dtype_ = get_dtype(device_);
  set_dtype(device_, dtype);
  set_enabled(device_, true);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!enabled_) return;
  // Leaving the outermost autocast region frees the cast-weight cache, as Python's autocast does.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, prev_enabled_);
  set_dtype(device_, prev_dtype_);
}

}  // namespace engine
