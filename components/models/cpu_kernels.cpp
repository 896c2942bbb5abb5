#include "components/models/cpu_kernels.h"

#include <ATen/Parallel.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstring>

// Why these exist (convnext_atto, batch 64, 56x56 input, 1 thread, CPU time, Debian LibTorch 1.13
// with oneDNN 2.6; measured against conv2d / gelu on the same tensors):
// - conv_dw weight gradient: oneDNN has no fast channels-last depthwise backward-weights path
//   (3.0-5.2 ms per block at ~1 GFLOP/s; 9 ms for a 1x1 map). Here: 8-wide SIMD, 0.5-1.4 ms.
//   Block fwd+bwd: 8.6 -> 3.6 ms (14x14), 5.5 -> 1.6 (7x7), 3.9 -> 0.7 (3x3), 20 -> 0.6 (1x1).
// - exact GELU: forward is ~7x slower on channels-last NCHW strides than on the same memory as a
//   dense NHWC view; backward is scalar erf/exp. fwd+bwd on 2M elements: 23 -> 4.2 ms.
// The maths is unchanged, only the summation order differs (float rounding).

// The SIMD helpers below pass 32-byte vectors by value; they are always inlined, so the ABI note
// GCC gives for such functions compiled without AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool autocast_cpu() {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}

bool fast_path(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && !autocast_cpu();
}

// 8 floats: AVX2 code in the target("avx2,fma") variants below, SSE (or NEON) code otherwise.
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
#define ENGINE_INLINE inline __attribute__((always_inline))
ENGINE_INLINE v8 load(const float* p) {
  v8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
ENGINE_INLINE void store(float* p, v8 v) { std::memcpy(p, &v, sizeof v); }
ENGINE_INLINE v8 splat(float f) { return v8{} + f; }

// ---- depthwise weight gradient -------------------------------------------------------------
// gw[i][j][c] += sum_{h<H, w<W} xp[h+i][w+j][c] * g[h][w][c] for one image (NHWC, dense), xp the
// input zero-padded by K/2: no bounds checks, and padding contributes exact zeros. K accumulators
// stay in registers over the whole image.
template <int K>
ENGINE_INLINE void dw_grad_image(const float* xp, const float* g, float* gw, int64_t H, int64_t W,
                                 int64_t C) {
  const int64_t Wp = W + K - 1;
  int64_t c0 = 0;
  for (; c0 + 8 <= C; c0 += 8) {
    for (int i = 0; i < K; ++i) {
      v8 acc[K];  // fully unrolled over j (GCC -O2 would not): the K accumulators live in registers
#pragma GCC unroll 8
      for (int j = 0; j < K; ++j) acc[j] = v8{};
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = xp + (h + i) * Wp * C + c0;
        const float* gr = g + h * W * C + c0;
        for (int64_t w = 0; w < W; ++w) {
          const v8 gv = load(gr + w * C);
#pragma GCC unroll 8
          for (int j = 0; j < K; ++j) acc[j] += load(xr + (w + j) * C) * gv;
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < K; ++j) store(gw + (i * K + j) * C + c0, load(gw + (i * K + j) * C + c0) + acc[j]);
    }
  }
  for (; c0 < C; ++c0)  // channels beyond a multiple of 8 (not hit by ConvNeXt's widths)
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < K; ++j) {
        float s = 0;
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w) s += xp[((h + i) * Wp + w + j) * C + c0] * g[(h * W + w) * C + c0];
        gw[(i * K + j) * C + c0] += s;
      }
}

template <int K>
void dw_grad_generic(const float* xp, const float* g, float* gw, int64_t H, int64_t W, int64_t C) {
  dw_grad_image<K>(xp, g, gw, H, W, C);
}
#if defined(__x86_64__) && defined(__GNUC__)
template <int K>
__attribute__((target("avx2,fma"))) void dw_grad_avx2(const float* xp, const float* g, float* gw, int64_t H,
                                                      int64_t W, int64_t C) {
  dw_grad_image<K>(xp, g, gw, H, W, C);
}
bool has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#endif

template <int K>
torch::Tensor dw_weight_grad(const torch::Tensor& x, const torch::Tensor& go) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), p = K / 2;
  // NHWC dense (free when channels-last), input zero-padded on H and W.
  torch::Tensor xp = torch::constant_pad_nd(x.permute({0, 2, 3, 1}), {0, 0, p, p, p, p}).contiguous();
  torch::Tensor g = go.permute({0, 2, 3, 1}).contiguous();
  auto kernel = &dw_grad_generic<K>;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) kernel = &dw_grad_avx2<K>;
#endif
  // A fixed split of the batch into chunks, each with its own partial sum, added in chunk order:
  // the result does not depend on which thread ran what.
  const int64_t chunks = std::min<int64_t>(N, std::max(1, at::get_num_threads()));
  torch::Tensor partial = torch::zeros({chunks, K, K, C}, x.options());
  const float* xd = xp.data_ptr<float>();
  const float* gd = g.data_ptr<float>();
  float* pd = partial.data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t n = t * N / chunks; n < (t + 1) * N / chunks; ++n)
        kernel(xd + n * (H + 2 * p) * (W + 2 * p) * C, gd + n * H * W * C, pd + t * K * K * C, H, W, C);
  });
  return partial.sum(0).permute({2, 0, 1}).unsqueeze(1).contiguous();  // [C, 1, K, K]
}

// Maps smaller than the kernel only reach its central (2H-1)x(2W-1) taps; the crop gives the
// same output without oneDNN's very slow path for, e.g., a 1x1 map with a 7x7 kernel.
struct Crop {
  torch::Tensor weight;
  int64_t ph, pw;
};
Crop crop(const torch::Tensor& w, int64_t H, int64_t W) {
  const int64_t k = w.size(2), p = k / 2, kh = std::min(k, 2 * H - 1), kw = std::min(k, 2 * W - 1);
  if (kh == k && kw == k) return {w, p, p};
  return {w.slice(2, p - kh / 2, p + kh / 2 + 1).slice(3, p - kw / 2, p + kw / 2 + 1), kh / 2, kw / 2};
}

struct DepthwiseSame : public torch::autograd::Function<DepthwiseSame> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    ctx->save_for_backward({x, w});
    Crop c = crop(w, x.size(2), x.size(3));
    return torch::conv2d(x, c.weight, b, 1, {c.ph, c.pw}, 1, x.size(1));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    torch::Tensor go = grads[0].contiguous(x.suggest_memory_format());
    Crop c = crop(w, x.size(2), x.size(3));
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0))
      gx = std::get<0>(at::convolution_backward(go, x, c.weight, c10::nullopt, {1, 1}, {c.ph, c.pw}, {1, 1},
                                                false, {0, 0}, x.size(1), {true, false, false}));
    if (ctx->needs_input_grad(1)) {
      const int64_t k = w.size(2);
      gw = k == 7 ? dw_weight_grad<7>(x, go) : k == 5 ? dw_weight_grad<5>(x, go) : dw_weight_grad<3>(x, go);
    }
    if (ctx->needs_input_grad(2)) gb = go.sum({0, 2, 3});
    return {gx, gw, gb};
  }
};

// ---- exact GELU -------------------------------------------------------------------------------
// d/dx [x Phi(x)] = Phi(x) + x phi(x). One exp serves both: e = exp(-x^2/2); with
// t = 1/(1 + p|x|/sqrt2), erfc(|x|/sqrt2) = t P(t) e (Abramowitz-Stegun 7.1.26, |err| <= 1.5e-7,
// the approximation LibTorch's own vectorised erf uses). Phi = 1 - q/2 (x >= 0) or q/2 (x < 0),
// which also avoids the 1 + erf cancellation for negative x.
ENGINE_INLINE v8 exp_nonpositive(v8 a) {  // Cephes expf for a in [-87, 0]
  const v8 fx = a * 1.44269504f - 0.5f;   // truncation toward zero rounds to nearest for a <= 0
  const v8i n = __builtin_convertvector(fx, v8i);
  const v8 nf = __builtin_convertvector(n, v8);
  const v8 r = a - nf * 0.693359375f + nf * 2.12194440e-4f;
  v8 q = splat(1.9875691500e-4f);
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  const v8 y = q * r * r + r + 1.0f;
  const v8i bits = (n + 127) << 23;  // 2^n
  v8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

ENGINE_INLINE v8 gelu_grad8(v8 x, v8 dy) {
  v8 a = x * x * -0.5f;
  a = a < splat(-87.f) ? splat(-87.f) : a;
  const v8 e = exp_nonpositive(a);
  const v8 ax = x < splat(0.f) ? -x : x;
  const v8 t = 1.0f / (1.0f + (0.3275911f * 0.70710678f) * ax);
  const v8 poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const v8 q = poly * e;
  const v8 cdf = x < splat(0.f) ? 0.5f * q : 1.0f - 0.5f * q;
  return dy * (cdf + x * (e * 0.3989422804f));
}

ENGINE_INLINE void gelu_grad_span(const float* x, const float* dy, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store(out + i, gelu_grad8(load(x + i), load(dy + i)));
  if (i < n) {  // tail through a zero-padded lane buffer
    float xb[8] = {}, db[8] = {}, ob[8];
    std::memcpy(xb, x + i, (n - i) * sizeof(float));
    std::memcpy(db, dy + i, (n - i) * sizeof(float));
    store(ob, gelu_grad8(load(xb), load(db)));
    std::memcpy(out + i, ob, (n - i) * sizeof(float));
  }
}
void gelu_grad_generic(const float* x, const float* dy, float* out, int64_t n) {
  gelu_grad_span(x, dy, out, n);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void gelu_grad_avx2(const float* x, const float* dy, float* out,
                                                        int64_t n) {
  gelu_grad_span(x, dy, out, n);
}
#endif

torch::Tensor gelu_dense(const torch::Tensor& x) {
  if (x.dim() == 4 && !x.is_contiguous() && x.is_contiguous(torch::MemoryFormat::ChannelsLast))
    return torch::gelu(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  return torch::gelu(x);
}

struct GeluExact : public torch::autograd::Function<GeluExact> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x) {
    ctx->save_for_backward({x});
    return gelu_dense(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor x = ctx->get_saved_variables()[0];
    // x and dy in one dense layout, so that element i of each buffer is the same element.
    auto format = x.dim() == 4 ? x.suggest_memory_format() : torch::MemoryFormat::Contiguous;
    x = x.contiguous(format);
    torch::Tensor dy = grads[0].contiguous(format);
    torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Preserve);
    auto kernel = &gelu_grad_generic;
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_avx2()) kernel = &gelu_grad_avx2;
#endif
    const float* xd = x.data_ptr<float>();
    const float* dd = dy.data_ptr<float>();
    float* od = out.data_ptr<float>();
    at::parallel_for(0, x.numel(), 1 << 14,
                     [&](int64_t b, int64_t e) { kernel(xd + b, dd + b, od + b, e - b); });
    return {out};
  }
};

}  // namespace

torch::Tensor depthwise_conv2d_same(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias) {
  const int64_t k = weight.size(2);
  const bool custom = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad()) &&
                      fast_path(x) && weight.scalar_type() == torch::kFloat && (k == 3 || k == 5 || k == 7) &&
                      weight.size(3) == k;
  if (custom) return DepthwiseSame::apply(x, weight, bias);
  Crop c = crop(weight, x.size(2), x.size(3));
  return torch::conv2d(x, c.weight, bias, 1, {c.ph, c.pw}, 1, x.size(1));
}

torch::Tensor gelu_exact(const torch::Tensor& x) {
  if (torch::GradMode::is_enabled() && x.requires_grad() && fast_path(x)) return GeluExact::apply(x);
  return gelu_dense(x);
}

}  // namespace engine
