#include "components/models/layer_norm_kernel.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "components/models/simd.h"

// Vector code as in cpu_kernels.cpp: 8-float GCC vectors, an AVX2+FMA build of each kernel chosen
// at run time, the generic build otherwise. Same operations in both: results do not depend on the
// machine beyond FMA contraction.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using namespace simd;

ENGINE_INLINE float hsum(v8 v) {
  float s = 0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// One row: mean, 1/std, and y = (x - mean) * rstd * w + b.
ENGINE_INLINE void forward_row(const float* x, const float* w, const float* b, float* y, int64_t c, float eps,
                               float& mean_out, float& rstd_out) {
  v8 acc{};
  int64_t i = 0;
  for (; i + 8 <= c; i += 8) acc += load(x + i);
  float sum = hsum(acc);
  for (; i < c; ++i) sum += x[i];
  const float mean = sum / static_cast<float>(c);
  v8 acc2{};
  i = 0;
  for (; i + 8 <= c; i += 8) {
    const v8 d = load(x + i) - mean;
    acc2 += d * d;
  }
  float ss = hsum(acc2);
  for (; i < c; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(c) + eps);
  i = 0;
  for (; i + 8 <= c; i += 8) store(y + i, (load(x + i) - mean) * rstd * load(w + i) + load(b + i));
  for (; i < c; ++i) y[i] = (x[i] - mean) * rstd * w[i] + b[i];
  mean_out = mean;
  rstd_out = rstd;
}

// One row of the backward: dx, and dw/db accumulated into gw/gb.
ENGINE_INLINE void backward_row(const float* x, const float* dy, const float* w, float mean, float rstd, float* dx,
                                float* gw, float* gb, int64_t c) {
  v8 a1{}, a2{};
  int64_t i = 0;
  for (; i + 8 <= c; i += 8) {
    const v8 g = load(dy + i) * load(w + i);
    const v8 xh = (load(x + i) - mean) * rstd;
    a1 += g;
    a2 += g * xh;
  }
  float s1 = hsum(a1), s2 = hsum(a2);
  for (; i < c; ++i) {
    const float g = dy[i] * w[i], xh = (x[i] - mean) * rstd;
    s1 += g;
    s2 += g * xh;
  }
  const float m1 = s1 / static_cast<float>(c), m2 = s2 / static_cast<float>(c);
  i = 0;
  for (; i + 8 <= c; i += 8) {
    const v8 d = load(dy + i), xh = (load(x + i) - mean) * rstd;
    store(dx + i, (d * load(w + i) - m1 - xh * m2) * rstd);
    store(gw + i, load(gw + i) + d * xh);
    store(gb + i, load(gb + i) + d);
  }
  for (; i < c; ++i) {
    const float d = dy[i], xh = (x[i] - mean) * rstd;
    dx[i] = (d * w[i] - m1 - xh * m2) * rstd;
    gw[i] += d * xh;
    gb[i] += d;
  }
}

struct Rows {
  const float *x, *w, *b;
  float *y, *mean, *rstd;
  int64_t c;
  float eps;
};
void forward_rows_generic(const Rows& r, int64_t b, int64_t e) {
  for (int64_t n = b; n < e; ++n) forward_row(r.x + n * r.c, r.w, r.b, r.y + n * r.c, r.c, r.eps, r.mean[n], r.rstd[n]);
}
struct BackRows {
  const float *x, *dy, *w, *mean, *rstd;
  float *dx, *gw, *gb;  // gw/gb: this chunk's partial sums
  int64_t c;
};
void backward_rows_generic(const BackRows& r, int64_t b, int64_t e) {
  for (int64_t n = b; n < e; ++n)
    backward_row(r.x + n * r.c, r.dy + n * r.c, r.w, r.mean[n], r.rstd[n], r.dx + n * r.c, r.gw, r.gb, r.c);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void forward_rows_avx2(const Rows& r, int64_t b, int64_t e) {
  for (int64_t n = b; n < e; ++n) forward_row(r.x + n * r.c, r.w, r.b, r.y + n * r.c, r.c, r.eps, r.mean[n], r.rstd[n]);
}
__attribute__((target("avx2,fma"))) void backward_rows_avx2(const BackRows& r, int64_t b, int64_t e) {
  for (int64_t n = b; n < e; ++n)
    backward_row(r.x + n * r.c, r.dy + n * r.c, r.w, r.mean[n], r.rstd[n], r.dx + n * r.c, r.gw, r.gb, r.c);
}
#endif

// Rows of a contiguous [..., C] tensor: the forward, with the statistics the backward needs.
void forward(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, double eps, torch::Tensor& y,
             torch::Tensor& mean, torch::Tensor& rstd) {
  const int64_t c = x.size(-1), rows = c ? x.numel() / c : 0;
  y = torch::empty_like(x);
  mean = torch::empty({rows}, x.options());
  rstd = torch::empty({rows}, x.options());
  Rows r{x.data_ptr<float>(), w.data_ptr<float>(), b.data_ptr<float>(), y.data_ptr<float>(),
         mean.data_ptr<float>(), rstd.data_ptr<float>(), c, static_cast<float>(eps)};
  auto kernel = &forward_rows_generic;
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) kernel = &forward_rows_avx2;
#endif
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(c, 1)),
                   [&](int64_t b0, int64_t e0) { kernel(r, b0, e0); });
}

struct LayerNormLastDim : public torch::autograd::Function<LayerNormLastDim> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b, double eps) {
    torch::Tensor y, mean, rstd;
    engine::forward(x, w, b, eps, y, mean, rstd);
    ctx->save_for_backward({x, w, mean, rstd});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const torch::Tensor &x = s[0], &w = s[1], &mean = s[2], &rstd = s[3];
    torch::Tensor dy = grads[0].contiguous();
    const int64_t c = x.size(-1), rows = c ? x.numel() / c : 0;
    torch::Tensor dx = torch::empty_like(x);
    // A fixed split of the rows into chunks, each with its own dw/db partial sums, added in chunk
    // order: the result does not depend on which thread ran which chunk.
    const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(rows, at::get_num_threads()));
    torch::Tensor partial = torch::zeros({chunks, 2, c}, x.options());
    auto kernel = &backward_rows_generic;
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_avx2()) kernel = &backward_rows_avx2;
#endif
    at::parallel_for(0, chunks, 1, [&](int64_t b0, int64_t e0) {
      for (int64_t t = b0; t < e0; ++t) {
        float* pw = partial.data_ptr<float>() + t * 2 * c;
        BackRows r{x.data_ptr<float>(), dy.data_ptr<float>(), w.data_ptr<float>(), mean.data_ptr<float>(),
                   rstd.data_ptr<float>(), dx.data_ptr<float>(), pw, pw + c, c};
        kernel(r, t * rows / chunks, (t + 1) * rows / chunks);
      }
    });
    torch::Tensor sums = partial.sum(0);
    return {dx, sums[0], sums[1], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor layer_norm_last_dim(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  double eps) {
  const bool own = simd::cpu_float(x) && x.is_contiguous() && x.dim() >= 1 &&
                   weight.defined() && bias.defined() && weight.scalar_type() == torch::kFloat &&
                   bias.scalar_type() == torch::kFloat && weight.is_contiguous() && bias.is_contiguous() &&
                   weight.numel() == x.size(-1);
  if (!own) return torch::layer_norm(x, {x.size(-1)}, weight, bias, eps);
  if (torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad() || bias.requires_grad()))
    return LayerNormLastDim::apply(x, weight, bias, eps);
  torch::Tensor y, mean, rstd;
  forward(x, weight, bias, eps, y, mean, rstd);
  return y;
}

}  // namespace engine
