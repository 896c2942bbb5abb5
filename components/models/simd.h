#pragma once
// Shared by the models' own CPU kernels (cpu_kernels.cpp, layer_norm_kernel.cpp, convnext_mlp.cpp):
// 8-float GCC vectors (AVX2 code inside target("avx2,fma") functions, SSE or NEON code elsewhere),
// the run-time AVX2 check, and the condition under which a kernel replaces a torch op. Internal to
// components/models.
#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/types.h>
#include <torch/version.h>

#include <cstdint>
#include <cstring>

namespace engine::simd {

typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define ENGINE_INLINE inline __attribute__((always_inline))

ENGINE_INLINE v8 load(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
ENGINE_INLINE void store(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }

/// True on x86-64 CPUs with AVX2 and FMA (the target("avx2,fma") variants may run).
inline bool has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

/// CPU autocast is on (then the kernels leave the op to torch, which autocast routes).
inline bool autocast_cpu() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}

/// CPU autocast off for the guard's lifetime (on 1.13 and 2.x both, "autocast on" is the AutocastCPU
/// dispatch key not being excluded): ops inside run in their inputs' dtype, and cpu_float() holds
/// for float32 tensors again. Nested autocast regions and the cast cache are left as they are.
class AutocastOffCpu {
 public:
  AutocastOffCpu() = default;
  AutocastOffCpu(const AutocastOffCpu&) = delete;
  AutocastOffCpu& operator=(const AutocastOffCpu&) = delete;

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_{c10::DispatchKey::AutocastCPU};
};

/// A CPU float32 tensor outside autocast: where the engine's kernels run.
inline bool cpu_float(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && !autocast_cpu();
}

}  // namespace engine::simd
