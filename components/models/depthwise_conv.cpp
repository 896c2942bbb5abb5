#include "components/models/depthwise_conv.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "components/models/simd.h"

// Why this exists (convnext_atto, 40x40 digits, batch 64, 1 thread; op-level profile of a training
// run, bench/RESULTS.md): through LibTorch 1.13 the depthwise 7x7 convolution was ~18% of a training
// step. Its forward ran in oneDNN at ~12 GFLOP/s; the backward padded a copy of the whole batch
// (a fill and a copy of every activation: as long as the weight gradient itself), then oneDNN's
// input gradient, then a weight-gradient kernel of ours on the padded copy.
// Here the three are one scheme: each image is padded into a per-thread scratch that stays in cache,
// then a register-blocked loop runs over it, vectorised over channels (16 lanes on AVX-512, 8 on
// AVX2): the forward and the input gradient (the same convolution with the kernel flipped) keep a
// strip of up to 8 output pixels in registers; the weight gradient keeps one kernel row's taps.
// The maths is the convolution's; the summation order differs from oneDNN's (float rounding).

namespace engine {
namespace dwconv {  // not engine's anonymous namespace: the models' sources are compiled in unity batches
namespace {

using simd::load_lanes;
using simd::store_lanes;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One call's geometry: images [H, W, C] (NHWC), the kernel cropped to kh x kw (odd), zero padding
// kh / 2 and kw / 2. A map smaller than the kernel only reaches its central (2H - 1) x (2W - 1)
// taps; the crop drops the ones that would only ever multiply padding.
struct Shape {
  int64_t N, H, W, C, k;
  int kh, kw;
  int64_t ph() const { return kh / 2; }
  int64_t pw() const { return kw / 2; }
  int64_t padded_width() const { return W + 2 * pw(); }
  int64_t padded_floats() const { return (H + 2 * ph()) * padded_width() * C; }
  int64_t image_floats() const { return H * W * C; }
  bool cropped() const { return kh != k || kw != k; }
};
Shape shape_of(const torch::Tensor& x, const torch::Tensor& weight) {
  const int64_t k = weight.size(2), H = x.size(2), W = x.size(3);
  return {x.size(0), H, W, x.size(1), k, static_cast<int>(std::min(k, 2 * H - 1)),
          static_cast<int>(std::min(k, 2 * W - 1))};
}

// src [H, W, C] -> dst [H + 2 ph, W + 2 pw, C], zero borders.
void pad_image(const float* src, float* dst, const Shape& s) {
  const int64_t row = s.W * s.C, padded_row = s.padded_width() * s.C, side = s.pw() * s.C;
  std::memset(dst, 0, s.ph() * padded_row * sizeof(float));
  for (int64_t h = 0; h < s.H; ++h) {
    float* d = dst + (h + s.ph()) * padded_row;
    std::memset(d, 0, side * sizeof(float));
    std::memcpy(d + side, src + h * row, row * sizeof(float));
    std::memset(d + side + row, 0, side * sizeof(float));
  }
  std::memset(dst + (s.ph() + s.H) * padded_row, 0, s.ph() * padded_row * sizeof(float));
}

// ---- forward and input gradient -------------------------------------------------------------------
// y[h][w0 + t][c] = bias[c] + sum_{i < kh, j < KW} xp[h + i][w0 + t + j][c] * taps[i][j][c] for t < T and
// the V channels from c0: T accumulators and one kernel row's KW taps in registers.
template <int V, int KW, int T>
ENGINE_INLINE void conv_strip(const float* xp, const float* taps, const float* bias, float* y, int64_t h,
                              int64_t w0, int64_t c0, const Shape& s) {
  using F = typename simd::Vec<V>::f;
  const int64_t C = s.C;
  F acc[T];
  const F init = bias ? load_lanes<V>(bias + c0) : F{};
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = init;
  for (int i = 0; i < s.kh; ++i) {
    const float* xr = xp + ((h + i) * s.padded_width() + w0) * C + c0;
    const float* tr = taps + i * KW * C + c0;
    F tap[KW];
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) tap[j] = load_lanes<V>(tr + j * C);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
      for (int j = 0; j < KW; ++j) acc[t] += load_lanes<V>(xr + (t + j) * C) * tap[j];
  }
  float* yr = y + (h * s.W + w0) * C + c0;
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) store_lanes<V>(yr + t * C, acc[t]);
}

// Every output pixel of one image for the V channels from c0: strips of TMAX, then 4, 2, 1.
template <int V, int KW, int TMAX>
ENGINE_INLINE void conv_channels(const float* xp, const float* taps, const float* bias, float* y, int64_t c0,
                                 const Shape& s) {
  for (int64_t h = 0; h < s.H; ++h) {
    int64_t w = 0;
    for (; w + TMAX <= s.W; w += TMAX) conv_strip<V, KW, TMAX>(xp, taps, bias, y, h, w, c0, s);
    if (TMAX > 4 && w + 4 <= s.W) conv_strip<V, KW, 4>(xp, taps, bias, y, h, w, c0, s), w += 4;
    if (w + 2 <= s.W) conv_strip<V, KW, 2>(xp, taps, bias, y, h, w, c0, s), w += 2;
    if (w < s.W) conv_strip<V, KW, 1>(xp, taps, bias, y, h, w, c0, s);
  }
}

template <int V, int TMAX>
ENGINE_INLINE void conv_kw(const float* xp, const float* taps, const float* bias, float* y, int64_t c0,
                           const Shape& s) {
  switch (s.kw) {  // odd and <= 7 (depthwise_conv2d_same's condition, then the crop)
    case 1: return conv_channels<V, 1, TMAX>(xp, taps, bias, y, c0, s);
    case 3: return conv_channels<V, 3, TMAX>(xp, taps, bias, y, c0, s);
    case 5: return conv_channels<V, 5, TMAX>(xp, taps, bias, y, c0, s);
    default: return conv_channels<V, 7, TMAX>(xp, taps, bias, y, c0, s);
  }
}

// One padded image: channels in groups of V1 lanes, the rest in groups of V2 (C is a multiple of 8).
template <int V1, int V2, int TMAX>
ENGINE_INLINE void conv_image(const float* xp, const float* taps, const float* bias, float* y, const Shape& s) {
  int64_t c0 = 0;
  for (; c0 + V1 <= s.C; c0 += V1) conv_kw<V1, TMAX>(xp, taps, bias, y, c0, s);
  for (; c0 + V2 <= s.C; c0 += V2) conv_kw<V2, TMAX>(xp, taps, bias, y, c0, s);
}

// ---- weight and bias gradients ---------------------------------------------------------------------
// gw[i][j][c] += sum_{h, w} xp[h + i][w + j][c] * g[h][w][c] and gb[c] += sum_{h, w} g[h][w][c], for the
// V channels from c0: one kernel row's KW taps accumulate in registers over the whole image.
template <int V, int KW>
ENGINE_INLINE void grad_channels(const float* xp, const float* g, float* gw, float* gb, int64_t c0,
                                 const Shape& s) {
  using F = typename simd::Vec<V>::f;
  const int64_t C = s.C;
  for (int i = 0; i < s.kh; ++i) {
    F acc[KW];
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) acc[j] = F{};
    for (int64_t h = 0; h < s.H; ++h) {
      const float* xr = xp + (h + i) * s.padded_width() * C + c0;
      const float* gr = g + h * s.W * C + c0;
      for (int64_t w = 0; w < s.W; ++w) {
        const F gv = load_lanes<V>(gr + w * C);
#pragma GCC unroll 8
        for (int j = 0; j < KW; ++j) acc[j] += load_lanes<V>(xr + (w + j) * C) * gv;
      }
    }
    float* gr = gw + i * KW * C + c0;
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) store_lanes<V>(gr + j * C, load_lanes<V>(gr + j * C) + acc[j]);
  }
  F sum{};
  for (int64_t p = 0; p < s.H * s.W; ++p) sum += load_lanes<V>(g + p * C + c0);
  store_lanes<V>(gb + c0, load_lanes<V>(gb + c0) + sum);
}

template <int V>
ENGINE_INLINE void grad_kw(const float* xp, const float* g, float* gw, float* gb, int64_t c0, const Shape& s) {
  switch (s.kw) {
    case 1: return grad_channels<V, 1>(xp, g, gw, gb, c0, s);
    case 3: return grad_channels<V, 3>(xp, g, gw, gb, c0, s);
    case 5: return grad_channels<V, 5>(xp, g, gw, gb, c0, s);
    default: return grad_channels<V, 7>(xp, g, gw, gb, c0, s);
  }
}

template <int V1, int V2>
ENGINE_INLINE void grad_image(const float* xp, const float* g, float* gw, float* gb, const Shape& s) {
  int64_t c0 = 0;
  for (; c0 + V1 <= s.C; c0 += V1) grad_kw<V1>(xp, g, gw, gb, c0, s);
  for (; c0 + V2 <= s.C; c0 += V2) grad_kw<V2>(xp, g, gw, gb, c0, s);
}

// ---- the variant this CPU runs ---------------------------------------------------------------------
using ConvImage = void (*)(const float*, const float*, const float*, float*, const Shape&);
using GradImage = void (*)(const float*, const float*, float*, float*, const Shape&);
struct Kernels {
  ConvImage conv;
  GradImage grad;
};
// 8 lanes as GCC vectors (SSE or NEON pairs); strips of 4 keep the accumulators in 16 registers.
void conv_generic(const float* xp, const float* taps, const float* b, float* y, const Shape& s) {
  conv_image<8, 8, 4>(xp, taps, b, y, s);
}
void grad_generic(const float* xp, const float* g, float* gw, float* gb, const Shape& s) {
  grad_image<8, 8>(xp, g, gw, gb, s);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void conv_avx2(const float* xp, const float* taps, const float* b, float* y,
                                                   const Shape& s) {
  conv_image<8, 8, 4>(xp, taps, b, y, s);
}
__attribute__((target("avx2,fma"))) void grad_avx2(const float* xp, const float* g, float* gw, float* gb,
                                                   const Shape& s) {
  grad_image<8, 8>(xp, g, gw, gb, s);
}
// 16 lanes, then 8 for a width like 40 = 16 + 16 + 8; 32 registers hold 8 accumulators and 7 taps.
__attribute__((target("avx512f,avx512vl,fma"))) void conv_avx512(const float* xp, const float* taps, const float* b,
                                                                 float* y, const Shape& s) {
  conv_image<16, 8, 8>(xp, taps, b, y, s);
}
__attribute__((target("avx512f,avx512vl,fma"))) void grad_avx512(const float* xp, const float* g, float* gw,
                                                                 float* gb, const Shape& s) {
  grad_image<16, 8>(xp, g, gw, gb, s);
}
#endif
const Kernels& kernels() {
  static const Kernels k = [] {
#if defined(__x86_64__) && defined(__GNUC__)
    if (simd::has_avx512f() && __builtin_cpu_supports("avx512vl")) return Kernels{&conv_avx512, &grad_avx512};
    if (simd::has_avx2()) return Kernels{&conv_avx2, &grad_avx2};
#endif
    return Kernels{&conv_generic, &grad_generic};
  }();
  return k;
}

// One padded image's worth of floats for the calling thread (reused across calls).
float* scratch(int64_t floats) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(floats);
  return buffer.data();
}

// y[n] = the convolution of x[n] (NHWC, dense) with taps [kh, kw, C] (+ bias) for every image.
void conv_batch(const float* x, const float* taps, const float* bias, float* y, const Shape& s) {
  const ConvImage conv = kernels().conv;
  at::parallel_for(0, s.N, 1, [&](int64_t begin, int64_t end) {
    float* xp = scratch(s.padded_floats());
    for (int64_t n = begin; n < end; ++n) {
      pad_image(x + n * s.image_floats(), xp, s);
      conv(xp, taps, bias, y + n * s.image_floats(), s);
    }
  });
}

// gw [kh, kw, C] and gb [C], summed over the batch: fixed chunks of images, each into its own partial
// sums, added in chunk order, so that the result does not depend on the number of threads.
void grad_batch(const float* x, const float* g, float* gw, float* gb, const Shape& s) {
  constexpr int64_t kChunk = 8;
  const int64_t chunks = (s.N + kChunk - 1) / kChunk, taps = s.kh * s.kw * s.C, stride = taps + s.C;
  std::vector<float> partial(chunks * stride, 0.f);
  const GradImage grad = kernels().grad;
  at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
    float* xp = scratch(s.padded_floats());
    for (int64_t t = begin; t < end; ++t) {
      float* p = partial.data() + t * stride;
      for (int64_t n = t * kChunk; n < std::min(s.N, (t + 1) * kChunk); ++n) {
        pad_image(x + n * s.image_floats(), xp, s);
        grad(xp, g + n * s.image_floats(), p, p + taps, s);
      }
    }
  });
  std::fill(gw, gw + taps, 0.f);
  std::fill(gb, gb + s.C, 0.f);
  for (int64_t t = 0; t < chunks; ++t) {
    const float* p = partial.data() + t * stride;
    for (int64_t i = 0; i < taps; ++i) gw[i] += p[i];
    for (int64_t c = 0; c < s.C; ++c) gb[c] += p[taps + c];
  }
}

// ---- tensors ---------------------------------------------------------------------------------------
// x's memory as dense NHWC: free for a channels-last tensor.
torch::Tensor nhwc(const torch::Tensor& x) { return x.permute({0, 2, 3, 1}).contiguous(); }

// The central kh x kw taps of a [C, 1, k, k] weight (or of its gradient): the ones the map reaches (a view).
torch::Tensor central_taps(const torch::Tensor& w, const Shape& s) {
  const int64_t p = s.k / 2;
  return w.slice(2, p - s.ph(), p + s.ph() + 1).slice(3, p - s.pw(), p + s.pw() + 1);
}

// The weight as the kernels read it: its central taps as [kh, kw, C], flipped in both directions for
// the input gradient (the transposed convolution).
// A plain loop: the permute + contiguous it replaces cost ~30 us a call in dispatch and strided copy
// (0.9% of an evaluation, op profile), for C x 49 floats.
torch::Tensor taps_of(const torch::Tensor& weight, const Shape& s, bool flip) {
  const torch::Tensor w = weight.contiguous();
  torch::Tensor t = torch::empty({s.kh, s.kw, s.C}, w.options());
  const float* wd = w.data_ptr<float>();
  float* td = t.data_ptr<float>();
  const int64_t y0 = s.k / 2 - s.ph(), x0 = s.k / 2 - s.pw();
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j) {
      const int64_t wi = y0 + (flip ? s.kh - 1 - i : i), wj = x0 + (flip ? s.kw - 1 - j : j);
      float* out = td + (i * s.kw + j) * s.C;
      for (int64_t c = 0; c < s.C; ++c) out[c] = wd[(c * s.k + wi) * s.k + wj];
    }
  return t;
}

// The convolution of x_nhwc [N, H, W, C] with the taps (+ bias), as an [N, C, H, W] channels-last tensor.
torch::Tensor convolve(const torch::Tensor& x_nhwc, const torch::Tensor& taps, const torch::Tensor& bias,
                       const Shape& s) {
  torch::Tensor y = torch::empty({s.N, s.C, s.H, s.W}, x_nhwc.options().memory_format(torch::MemoryFormat::ChannelsLast));
  torch::Tensor b = bias.defined() ? bias.contiguous() : bias;
  conv_batch(x_nhwc.data_ptr<float>(), taps.data_ptr<float>(), b.defined() ? b.data_ptr<float>() : nullptr,
             y.data_ptr<float>(), s);
  return y;
}

// The forward of depthwise_conv2d_same in the engine's kernels.
torch::Tensor convolve_same(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const Shape s = shape_of(x, weight);
  return convolve(nhwc(x), taps_of(weight, s, false), bias, s);
}

struct DepthwiseSame : public torch::autograd::Function<DepthwiseSame> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    ctx->save_for_backward({x, weight});
    return convolve_same(x, weight, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];
    const Shape s = shape_of(x, weight);
    const torch::Tensor g = nhwc(grads[0]);
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) gx = convolve(g, taps_of(weight, s, true), {}, s);
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      torch::Tensor gtaps = torch::empty({s.kh, s.kw, s.C}, g.options());
      gb = torch::empty({s.C}, g.options());
      grad_batch(nhwc(x).data_ptr<float>(), g.data_ptr<float>(), gtaps.data_ptr<float>(), gb.data_ptr<float>(), s);
      torch::Tensor per_channel = gtaps.permute({2, 0, 1});  // [C, kh, kw]
      if (s.cropped()) {  // the taps that only see padding get a zero gradient
        gw = torch::zeros({s.C, 1, s.k, s.k}, g.options());
        central_taps(gw, s).select(1, 0).copy_(per_channel);
      } else {
        gw = per_channel.unsqueeze(1).contiguous();
      }
      if (!ctx->needs_input_grad(2)) gb = torch::Tensor();
      if (!ctx->needs_input_grad(1)) gw = torch::Tensor();
    }
    return {gx, gw, gb};
  }
};

bool own_kernels(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (x.dim() != 4 || weight.dim() != 4 || !simd::cpu_float(x) || !weight.device().is_cpu() ||
      weight.scalar_type() != torch::kFloat || (bias.defined() && bias.scalar_type() != torch::kFloat))
    return false;
  const int64_t k = weight.size(2), C = x.size(1);
  return (k == 3 || k == 5 || k == 7) && weight.size(3) == k && weight.size(0) == C && weight.size(1) == 1 &&
         C % 8 == 0 && x.size(2) > 0 && x.size(3) > 0;
}

}  // namespace
}  // namespace dwconv

torch::Tensor depthwise_conv2d_same(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias) {
  RECORD_FUNCTION("engine::depthwise_conv2d_same", std::vector<c10::IValue>({x}));
  if (dwconv::own_kernels(x, weight, bias)) {
    const bool grad = torch::GradMode::is_enabled() &&
                      (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
    // LibTorch 1.13's custom functions take no undefined tensor: a missing bias is a zero one.
    if (grad) return dwconv::DepthwiseSame::apply(x, weight, bias.defined() ? bias : torch::zeros({x.size(1)}, x.options()));
    return dwconv::convolve_same(x, weight, bias);
  }
  // torch's convolution, on the central taps only where the map is smaller than the kernel (the same
  // output, without oneDNN's very slow path for, e.g., a 1x1 map with a 7x7 kernel).
  const dwconv::Shape s = dwconv::shape_of(x, weight);
  return torch::conv2d(x, dwconv::central_taps(weight, s), bias, 1, {s.ph(), s.pw()}, 1, x.size(1));
}

}  // namespace engine
