#include "components/models/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "components/models/gelu_tables.h"
#include "components/models/simd.h"

// Why this exists (convnext_atto, batch 64, 56x56 input, 1 thread, CPU time, Debian LibTorch 1.13
// with oneDNN 2.6; measured against torch::gelu on the same tensors):
// - exact GELU: forward is ~7x slower on channels-last NCHW strides than on the same memory as a
//   dense NHWC view; backward is scalar erf/exp. fwd+bwd on 2M elements: 23 -> 4.2 ms. Then
//   16-wide on AVX-512 (40x40 input, the MLP's [M, 4C] rows, 4.2M elements a step): fwd+bwd
//   10.7 -> 8.2 ms a step (fwd 3.2 -> 2.5, bwd 7.5 -> 5.7).
// (Convolutions as GEMMs, the stride == kernel ones of ConvNeXt among them: im2col_conv.cpp; the
// depthwise convolution: depthwise_conv.cpp.)
// The maths is unchanged, only the summation order differs (float rounding).

// The SIMD helpers below pass 32- and 64-byte vectors by value; they are always inlined, so the ABI note
// GCC gives for such functions compiled without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using namespace simd;

// ---- exact GELU -------------------------------------------------------------------------------
// gelu(x) = x Phi(x); d/dx = Phi(x) + x phi(x). One exp serves both: e = exp(-x^2/2); with
// t = 1/(1 + p|x|/sqrt2), erfc(|x|/sqrt2) = t P(t) e (Abramowitz-Stegun 7.1.26, |err| <= 1.5e-7,
// the approximation LibTorch's own vectorised erf uses). Phi = 1 - q/2 (x >= 0) or q/2 (x < 0),
// which also avoids the 1 + erf cancellation for negative x.
// Width-generic (W floats per vector): 16 in the AVX-512 variants, 8 elsewhere. Measured on this
// Xeon (Ice Lake, 1 thread, 1M elements): backward 1.1 ns/element with 8-wide AVX2 vs 0.73 with
// 16-wide AVX-512, about the 0.5-0.6 ns/element that only streaming x, dy and the result through
// L3 costs; the division is not the limit (a reciprocal estimate + Newton step measured the same).
template <int W>
ENGINE_INLINE typename Vec<W>::f exp_nonpositive(typename Vec<W>::f a) {  // Cephes expf, a in [-87, 0]
  using F = typename Vec<W>::f;
  using I = typename Vec<W>::i;
  const F fx = a * 1.44269504f - 0.5f;  // truncation toward zero rounds to nearest for a <= 0
  const I n = __builtin_convertvector(fx, I);
  const F nf = __builtin_convertvector(n, F);
  const F r = a - nf * 0.693359375f + nf * 2.12194440e-4f;
  F q = F{} + 1.9875691500e-4f;
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  const F y = q * r * r + r + 1.0f;
  const I bits = (n + 127) << 23;  // 2^n
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// Phi(x) and phi(x) = e / sqrt(2 pi).
template <int W>
ENGINE_INLINE void normal_cdf_pdf(typename Vec<W>::f x, typename Vec<W>::f& cdf, typename Vec<W>::f& pdf) {
  using F = typename Vec<W>::f;
  F a = x * x * -0.5f;
  a = a < -87.f ? F{} - 87.f : a;
  const F e = exp_nonpositive<W>(a);
  const F ax = x < 0.f ? -x : x;
  const F t = 1.0f / (1.0f + (0.3275911f * 0.70710678f) * ax);
  const F poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const F q = poly * e;
  cdf = x < 0.f ? 0.5f * q : 1.0f - 0.5f * q;
  pdf = e * 0.3989422804f;
}

// W float lanes from and to the memory of a float32 tensor (simd.h)...
using simd::load_lanes;
using simd::store_lanes;
// ...or of a bf16 one (the MLP's hidden activations under bf16 autocast: convnext.cpp), through the
// same float lanes: widening is exact (a bf16 is the top half of a float), narrowing rounds to
// nearest even as c10::BFloat16 does, NaN stays NaN. So the result is the float GELU rounded once.
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

// out[i] = f(x[i], dy[i]) for W lanes at a time (T: float, or bf16 as uint16_t); the tail goes
// through zero-padded lane buffers.
template <int W, class T, class Op>
ENGINE_INLINE void map_span(const T* x, const T* dy, T* out, int64_t n, Op op) {
  using F = typename Vec<W>::f;
  int64_t i = 0;
  for (; i + W <= n; i += W) store_lanes<W>(out + i, op(load_lanes<W>(x + i), dy ? load_lanes<W>(dy + i) : F{}));
  if (i < n) {
    T xb[W] = {}, db[W] = {}, ob[W];
    std::memcpy(xb, x + i, (n - i) * sizeof(T));
    if (dy) std::memcpy(db, dy + i, (n - i) * sizeof(T));
    store_lanes<W>(ob, op(load_lanes<W>(xb), load_lanes<W>(db)));
    std::memcpy(out + i, ob, (n - i) * sizeof(T));
  }
}
// On AVX-512 (W = 16) the GELU takes no exp and no division: for u = |x| < 6, Q(u) = Phi(-u) and
// R(u) = u phi(u) - Q(u) are degree-5 polynomials on 32 intervals of u (gelu_tables.h, from
// tools/gelu_tables.py; largest error 4.2e-8, under the 7.5e-8 of the A-S erfc above), 0 from 6 on
// (Q(6) = 1e-9). The 32 values of a coefficient fill two registers and a two-source shuffle
// (vpermt2ps) picks each lane's interval. gelu(x) = x (1 - Q), gelu'(x) = 1 + R for x >= 0; x Q and
// -R for x < 0. 2.1x the throughput of the exp + erfc formula on a Zen 4 (1 thread, in cache: 0.25
// vs 0.54 ns per element). Generic vector code (no intrinsics): it compiles inside the callers'
// target("avx512f") functions.
// GCC's __builtin_shuffle takes lane indices at run time; Clang's vector builtins do not (a Clang build
// keeps the formula).
using F16 = Vec<16>::f;
using I16 = Vec<16>::i;
#if defined(__GNUC__) && !defined(__clang__)
constexpr bool kGeluTables = true;
ENGINE_INLINE F16 table_at(const float (&c)[6][32], F16 x) {
  const F16 u = x < 0.f ? -x : x;
  F16 s = u * (32.f / 6.f);
  s = s < 31.999998f ? s : F16{} + 31.999998f;  // also for NaN
  const I16 i = __builtin_convertvector(s, I16);
  const F16 f = s - __builtin_convertvector(i, F16);
  auto coef = [&](int d) __attribute__((always_inline)) {
    return __builtin_shuffle(load_lanes<16>(c[d]), load_lanes<16>(c[d] + 16), i);
  };
  F16 p = coef(5);
#pragma GCC unroll 5
  for (int d = 4; d >= 0; --d) p = p * f + coef(d);
  return u < 6.f ? p : F16{};
}
#else
constexpr bool kGeluTables = false;
F16 table_at(const float (&)[6][32], F16 x);  // never called: kGeluTables is false
#endif

// gelu(v) and gelu'(v) on W lanes.
template <int W>
ENGINE_INLINE typename Vec<W>::f gelu_of(typename Vec<W>::f v) {
  if constexpr (W == 16 && kGeluTables) {
    const F16 q = table_at(kGeluQ, v);
    return v * (v < 0.f ? q : 1.f - q);
  } else {
    typename Vec<W>::f cdf, pdf;
    normal_cdf_pdf<W>(v, cdf, pdf);
    return v * cdf;
  }
}
template <int W>
ENGINE_INLINE typename Vec<W>::f gelu_slope(typename Vec<W>::f v) {
  if constexpr (W == 16 && kGeluTables) {
    const F16 r = table_at(kGeluR, v);
    return (v < 0.f ? -r : 1.f + r) + v * 0.f;  // + v * 0: NaN for a NaN or infinite v, as torch
  } else {
    typename Vec<W>::f cdf, pdf;
    normal_cdf_pdf<W>(v, cdf, pdf);
    return cdf + v * pdf;
  }
}

template <int W, class T>
ENGINE_INLINE void gelu_span(const T* x, const T*, T* y, int64_t n) {
  map_span<W>(x, static_cast<const T*>(nullptr), y, n,
              [](typename Vec<W>::f v, typename Vec<W>::f) __attribute__((always_inline)) { return gelu_of<W>(v); });
}
template <int W, class T>
ENGINE_INLINE void gelu_grad_span(const T* x, const T* dy, T* out, int64_t n) {
  map_span<W>(x, dy, out, n, [](typename Vec<W>::f v, typename Vec<W>::f d) __attribute__((always_inline)) {
    return d * gelu_slope<W>(v);
  });
}

template <class T>
using SpanKernel = void (*)(const T*, const T*, T*, int64_t);
template <class T>
void gelu_generic(const T* x, const T* dy, T* y, int64_t n) {
  gelu_span<8>(x, dy, y, n);
}
template <class T>
void gelu_grad_generic(const T* x, const T* dy, T* out, int64_t n) {
  gelu_grad_span<8>(x, dy, out, n);
}
#if defined(__x86_64__) && defined(__GNUC__)
template <class T>
__attribute__((target("avx2,fma"))) void gelu_avx2(const T* x, const T* dy, T* y, int64_t n) {
  gelu_span<8>(x, dy, y, n);
}
template <class T>
__attribute__((target("avx2,fma"))) void gelu_grad_avx2(const T* x, const T* dy, T* out, int64_t n) {
  gelu_grad_span<8>(x, dy, out, n);
}
// avx512bw: the 16 x 16-bit moves of the bf16 variant (every AVX-512 CPU that runs these has it).
template <class T>
__attribute__((target("avx512f,avx512bw"))) void gelu_grad_avx512(const T* x, const T* dy, T* out, int64_t n) {
  gelu_grad_span<16>(x, dy, out, n);
}
template <class T>
__attribute__((target("avx512f,avx512bw"))) void gelu_avx512(const T* x, const T* dy, T* y, int64_t n) {
  gelu_span<16>(x, dy, y, n);
}
bool has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
#endif

// ---- GELU backward on GEMM rows, with the bias gradient (convnext_mlp.h's fused MLP) ------------
// Row by row: g = g * gelu'(h) in place (gelu_grad_span), then col_sum += that row while it is in L1.
template <int W>
ENGINE_INLINE void gelu_grad_rows_w(const float* h, float* g, float* col_sum, int64_t rows, int64_t cols) {
  const int64_t full = cols / W * W;
  for (int64_t r = 0; r < rows; ++r) {
    float* gr = g + r * cols;
    gelu_grad_span<W>(h + r * cols, gr, gr, cols);
    for (int64_t i = 0; i < full; i += W)
      store_lanes<W>(col_sum + i, load_lanes<W>(col_sum + i) + load_lanes<W>(gr + i));
    for (int64_t i = full; i < cols; ++i) col_sum[i] += gr[i];
  }
}
using GeluGradRows = void (*)(const float*, float*, float*, int64_t, int64_t);
void gelu_grad_rows_generic(const float* h, float* g, float* s, int64_t rows, int64_t cols) {
  gelu_grad_rows_w<8>(h, g, s, rows, cols);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void gelu_grad_rows_avx2(const float* h, float* g, float* s, int64_t rows,
                                                             int64_t cols) {
  gelu_grad_rows_w<8>(h, g, s, rows, cols);
}
__attribute__((target("avx512f,avx512bw"))) void gelu_grad_rows_avx512(const float* h, float* g, float* s,
                                                                      int64_t rows, int64_t cols) {
  gelu_grad_rows_w<16>(h, g, s, rows, cols);
}
#endif

// Runs kernel over the memory of dense tensors a, b (same strides, b may be undefined) into a new
// tensor of a's layout.
template <class T>
torch::Tensor map_dense(SpanKernel<T> kernel, const torch::Tensor& a, const torch::Tensor& b) {
  torch::Tensor out = torch::empty_like(a, torch::MemoryFormat::Preserve);
  const T* ad = static_cast<const T*>(a.data_ptr());
  const T* bd = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
  T* od = static_cast<T*>(out.data_ptr());
  at::parallel_for(0, a.numel(), 1 << 14,
                   [&](int64_t s, int64_t e) { kernel(ad + s, bd ? bd + s : nullptr, od + s, e - s); });
  return out;
}

// The GELU (grad = false) or its derivative times dy (grad = true) for float32 or bf16 (as uint16_t)
// memory: the widest variant this CPU runs.
template <class T>
SpanKernel<T> gelu_kernel(bool grad) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx512()) return grad ? &gelu_grad_avx512<T> : &gelu_avx512<T>;
  if (has_avx2()) return grad ? &gelu_grad_avx2<T> : &gelu_avx2<T>;
#endif
  return grad ? &gelu_grad_generic<T> : &gelu_generic<T>;
}
torch::Tensor map_gelu(bool grad, const torch::Tensor& x, const torch::Tensor& dy) {
  if (x.scalar_type() == torch::kBFloat16) return map_dense(gelu_kernel<uint16_t>(grad), x, dy);
  return map_dense(gelu_kernel<float>(grad), x, dy);
}

// x's memory as one dense buffer: x itself when it is (any dense layout), else a contiguous copy.
torch::Tensor dense(const torch::Tensor& x) { return x.is_non_overlapping_and_dense() ? x : x.contiguous(); }

torch::Tensor gelu_dense(const torch::Tensor& x) {
  if (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(torch::MemoryFormat::ChannelsLast))
    return torch::gelu(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  return torch::gelu(x);
}

// The forward: on AVX-512 our kernel (1M elements: 0.60 ms vs 0.73 for torch::gelu), else
// torch::gelu on a dense view (1.13's kernel is ~7x slower on channels-last NCHW strides). bf16:
// always ours (float lanes, one rounding).
torch::Tensor gelu_forward(const torch::Tensor& x) {
  if (x.scalar_type() == torch::kBFloat16) return map_gelu(false, dense(x), {});
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx512()) return map_gelu(false, dense(x), {});
#endif
  return gelu_dense(x);
}

struct GeluExact : public torch::autograd::Function<GeluExact> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x) {
    x = dense(x);
    ctx->save_for_backward({x});
    return gelu_forward(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor x = ctx->get_saved_variables()[0];
    // dy in x's layout, so that element i of each buffer is the same element.
    torch::Tensor dy = grads[0];
    if (dy.strides() != x.strides() || !dy.is_non_overlapping_and_dense())
      dy = torch::empty_like(x, torch::MemoryFormat::Preserve).copy_(dy);
    return {map_gelu(true, x, dy)};
  }
};

}  // namespace

torch::Tensor gelu_exact(const torch::Tensor& x) {
  RECORD_FUNCTION("engine::gelu_exact", std::vector<c10::IValue>({x}));
  // GELU is on none of autocast's lists: it runs in its input's dtype, float32 or bf16 alike.
  const bool own = x.device().is_cpu() && (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16);
  if (!own) return gelu_dense(x);
  if (torch::GradMode::is_enabled() && x.requires_grad()) return GeluExact::apply(x);
  return gelu_forward(x);
}

void gelu_grad_rows(const float* h, float* g, float* col_sum, int64_t rows, int64_t cols) {
  GeluGradRows kernel = &gelu_grad_rows_generic;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx512()) kernel = &gelu_grad_rows_avx512;
  else if (has_avx2()) kernel = &gelu_grad_rows_avx2;
#endif
  kernel(h, g, col_sum, rows, cols);
}

bool gelu_uses_tables() {
#if defined(__x86_64__) && defined(__GNUC__)
  return kGeluTables && has_avx512();
#else
  return false;
#endif
}

void gelu_span_float(const float* x, float* y, int64_t n) {
  static const SpanKernel<float> kernel = gelu_kernel<float>(false);
  kernel(x, nullptr, y, n);
}

}  // namespace engine
