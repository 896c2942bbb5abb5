#pragma once
// Shared by the models' own CPU kernels (cpu_kernels.cpp, depthwise_conv.cpp, layer_norm_kernel.cpp,
// convnext_mlp.cpp): 8- and W-float GCC vectors (AVX2 or AVX-512 code inside target(...) functions,
// SSE or NEON code elsewhere), the run-time AVX2 / AVX-512 checks, and the condition under which a
// kernel replaces a torch op. Internal to components/models.
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

// These helpers pass 32- and 64-byte vectors by value; they are always inlined into target("avx2")
// or target("avx512f") code, so the ABI note GCC gives for them (compiled without AVX) does not apply.
#pragma GCC diagnostic push
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

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

/// True on x86-64 CPUs with AVX-512F (the target("avx512f,fma") variants may run).
inline bool has_avx512f() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

/// W float lanes as one GCC vector (W = 8: AVX2 code, or SSE / NEON pairs; W = 16: AVX-512 code
/// inside target("avx512f") functions), loaded and stored unaligned.
template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(W * 4)));
  typedef int32_t i __attribute__((vector_size(W * 4)));
};
template <int W>
ENGINE_INLINE typename Vec<W>::f load_lanes(const float* p) {
  typename Vec<W>::f f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
template <int W>
ENGINE_INLINE void store_lanes(float* p, typename Vec<W>::f f) {
  std::memcpy(p, &f, sizeof f);
}
#pragma GCC diagnostic pop

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
