#pragma once
// Shared by the models' own CPU kernels (cpu_kernels.cpp, layer_norm_kernel.cpp, convnext_mlp.cpp):
// 8-float GCC vectors (AVX2 code inside target("avx2,fma") functions, SSE or NEON code elsewhere),
// W-lane loads and stores of float32 and bf16 memory, the run-time AVX2 check, and the condition
// under which a kernel replaces a torch op. Internal to components/models.
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

/// W-lane float vectors (W = 8: v8; 16 in the AVX-512 variants).
template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(W * 4)));
  typedef int32_t i __attribute__((vector_size(W * 4)));
};

/// W float lanes (Vec<W>::f) from and to the memory of a float32 tensor...
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
/// ...or of a bf16 one (as uint16_t: the MLP's activations under bf16 autocast, convnext.cpp), through
/// the same float lanes: widening is exact (a bf16 is the top half of a float), narrowing rounds to
/// nearest even as c10::BFloat16 does, NaN stays NaN: a float computation rounded once.
template <int W>
struct Bf16 {
  typedef uint16_t h __attribute__((vector_size(W * 2)));
  typedef uint32_t u __attribute__((vector_size(W * 4)));
};
template <int W>
ENGINE_INLINE typename Vec<W>::f load_lanes(const uint16_t* p) {  // bf16 -> float, exact
  typename Bf16<W>::h h;
  std::memcpy(&h, p, sizeof h);
  const typename Bf16<W>::u u = __builtin_convertvector(h, typename Bf16<W>::u) << 16;
  typename Vec<W>::f f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
template <int W>
ENGINE_INLINE void store_lanes(uint16_t* p, typename Vec<W>::f f) {  // float -> bf16, nearest even
  using U = typename Bf16<W>::u;
  U u;
  std::memcpy(&u, &f, sizeof u);
  U r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  r = (u & 0x7FFFFFFFu) > 0x7F800000u ? U{} + 0x7FC0u : r;
  const typename Bf16<W>::h h = __builtin_convertvector(r, typename Bf16<W>::h);
  std::memcpy(p, &h, sizeof h);
}

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
