#include "components/models/convnext_mlp.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "components/models/cpu_kernels.h"
#include "components/models/layers.h"
#include "components/models/packed_gemm.h"
#include "components/models/row_gemm.h"
#include "components/models/simd.h"
#include "engine/core/env.h"
#include "components/models/gradient_memory.h"

// Vector code as in layer_norm_kernel.cpp: 8-float GCC vectors, an AVX2+FMA build of each pass
// chosen at run time, the generic build otherwise.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using namespace simd;

// Rows per partial sum of the bias and gamma gradients: fixed, so that the sums (chunk partials
// added in chunk order) do not depend on the thread count.
constexpr int64_t kChunk = 256;

// [N, C, H, W] channels-last -> the [N*H*W, C] rows of its memory (a view).
torch::Tensor rows_of(const torch::Tensor& x) { return x.permute({0, 2, 3, 1}).reshape({-1, x.size(1)}); }
// Forward tail over rows [r0, r1): out = (y * gamma) * s[sample] + x, the order of the composed
// ops (layer scale, drop path, residual; y is fc2's output, bias included).
ENGINE_INLINE void tail_forward_rows(const float* x, const float* y, const float* gamma, const float* s,
                                     float* out, int64_t r0, int64_t r1, int64_t hw, int64_t c) {
  for (int64_t r = r0; r < r1; ++r) {
    const float sr = s[r / hw];
    const float *xr = x + r * c, *yr = y + r * c;
    float* o = out + r * c;
    int64_t i = 0;
    for (; i + 8 <= c; i += 8) store(o + i, load(yr + i) * load(gamma + i) * sr + load(xr + i));
    for (; i < c; ++i) o[i] = yr[i] * gamma[i] * sr + xr[i];
  }
}
// Backward tail over rows [r0, r1): gy = (g * s) * gamma; gb2 += gy; ggamma += (g * s) * y. gy
// points at row r0's output (a chunk's own buffer, or row r0 of the whole matrix).
ENGINE_INLINE void tail_backward_rows(const float* g, const float* y, const float* gamma, const float* s,
                                      float* gy, float* gb2, float* ggamma, int64_t r0, int64_t r1,
                                      int64_t hw, int64_t c) {
  for (int64_t r = r0; r < r1; ++r) {
    const float sr = s[r / hw];
    const float *gr = g + r * c, *yr = y + r * c;
    float* o = gy + (r - r0) * c;
    int64_t i = 0;
    for (; i + 8 <= c; i += 8) {
      const v8 gs = load(gr + i) * sr;
      const v8 d = gs * load(gamma + i);
      store(o + i, d);
      store(gb2 + i, load(gb2 + i) + d);
      store(ggamma + i, load(ggamma + i) + gs * load(yr + i));
    }
    for (; i < c; ++i) {
      const float gs = gr[i] * sr, d = gs * gamma[i];
      o[i] = d;
      gb2[i] += d;
      ggamma[i] += gs * yr[i];
    }
  }
}
using TailForward = void (*)(const float*, const float*, const float*, const float*, float*, int64_t, int64_t,
                             int64_t, int64_t);
using TailBackward = void (*)(const float*, const float*, const float*, const float*, float*, float*, float*,
                              int64_t, int64_t, int64_t, int64_t);
void tail_forward_generic(const float* x, const float* y, const float* gamma, const float* s, float* out,
                          int64_t r0, int64_t r1, int64_t hw, int64_t c) {
  tail_forward_rows(x, y, gamma, s, out, r0, r1, hw, c);
}
void tail_backward_generic(const float* g, const float* y, const float* gamma, const float* s, float* gy,
                           float* gb2, float* ggamma, int64_t r0, int64_t r1, int64_t hw, int64_t c) {
  tail_backward_rows(g, y, gamma, s, gy, gb2, ggamma, r0, r1, hw, c);
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void tail_forward_avx2(const float* x, const float* y, const float* gamma,
                                                           const float* s, float* out, int64_t r0, int64_t r1,
                                                           int64_t hw, int64_t c) {
  tail_forward_rows(x, y, gamma, s, out, r0, r1, hw, c);
}
__attribute__((target("avx2,fma"))) void tail_backward_avx2(const float* g, const float* y,
                                                            const float* gamma, const float* s, float* gy,
                                                            float* gb2, float* ggamma, int64_t r0, int64_t r1,
                                                            int64_t hw, int64_t c) {
  tail_backward_rows(g, y, gamma, s, gy, gb2, ggamma, r0, r1, hw, c);
}
#endif
TailForward tail_forward() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) return &tail_forward_avx2;
#endif
  return &tail_forward_generic;
}
TailBackward tail_backward() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (has_avx2()) return &tail_backward_avx2;
#endif
  return &tail_backward_generic;
}

int64_t chunks_of(int64_t rows) { return (rows + kChunk - 1) / kChunk; }
// Runs fn(chunk, r0, r1) over the rows in chunks of kChunk, in parallel.
template <class Fn>
void for_chunks(int64_t rows, const Fn& fn) {
  at::parallel_for(0, chunks_of(rows), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) fn(k, k * kChunk, std::min(rows, (k + 1) * kChunk));
  });
}
// Sum over dim 0 of [chunks, n] partials, chunk by chunk in order.
torch::Tensor sum_partials(const torch::Tensor& partial) {
  torch::Tensor out = partial[0].clone();
  float* o = out.data_ptr<float>();
  const float* p = partial.data_ptr<float>();
  const int64_t n = partial.size(1);
  for (int64_t k = 1; k < partial.size(0); ++k)
    for (int64_t i = 0; i < n; ++i) o[i] += p[k * n + i];
  return out;
}

struct Shape {
  int64_t n, c, h, w;
  int64_t rows() const { return n * h * w; }
};

// forward_rows where the packed kernels run (packed_rows), 96 rows at a time: fc1, the GELU and fc2
// on each block while it is in cache, then the block's tail. With `keep` (training) fc1 writes h's
// rows and the GELU a's (the backward's inputs) as it goes; without, both live in a per-task buffer
// and never reach memory (8 MB each for a stage-0 evaluation batch of 128). The same kernels in the
// same order as the unblocked products, so the same bits either way.
torch::Tensor forward_rows_blocked(const torch::Tensor& t_rows, const torch::Tensor& x_rows, const torch::Tensor& w1,
                                   const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                                   const torch::Tensor& gamma, const torch::Tensor& s, int64_t hw, bool keep,
                                   torch::Tensor& h, torch::Tensor& a, torch::Tensor& y) {
  constexpr int64_t kRows = 96;
  const int64_t rows = t_rows.size(0), c = t_rows.size(1), d = w1.size(0), ldt = t_rows.stride(0);
  const torch::Tensor m1 = as_matrix(w1), m2 = as_matrix(w2);
  const PackedB p1 = PackedB::transposed(m1.data_ptr<float>(), d, c, m1.stride(0));
  const PackedB p2 = PackedB::transposed(m2.data_ptr<float>(), c, d, m2.stride(0));
  y = torch::empty({rows, c}, t_rows.options());
  if (keep) {
    h = torch::empty({rows, d}, t_rows.options());
    a = torch::empty({rows, d}, t_rows.options());
  }
  torch::Tensor out = torch::empty({rows, c}, t_rows.options());
  const float *t = t_rows.data_ptr<float>(), *bias1 = b1.data_ptr<float>(), *bias2 = b2.data_ptr<float>();
  float* yd = y.data_ptr<float>();
  auto tail = tail_forward();
  at::parallel_for(0, (rows + kRows - 1) / kRows, 1, [&](int64_t first, int64_t end) {
    std::unique_ptr<float[]> hidden(keep ? nullptr : new float[static_cast<size_t>(kRows * d)]);  // not zeroed
    for (int64_t blk = first; blk < end; ++blk) {
      const int64_t r0 = blk * kRows, n = std::min(kRows, rows - r0);
      float* hb = keep ? h.data_ptr<float>() + r0 * d : hidden.get();
      float* ab = keep ? a.data_ptr<float>() + r0 * d : hb;
      gemm_packed_serial(n, t + r0 * ldt, ldt, p1, bias1, hb, d);
      gelu_span_float(hb, ab, n * d);
      gemm_packed_serial(n, ab, d, p2, bias2, yd + r0 * c, c);
      tail(x_rows.data_ptr<float>(), yd, gamma.data_ptr<float>(), s.data_ptr<float>(), out.data_ptr<float>(), r0,
           r0 + n, hw, c);
    }
  });
  return out;
}

// The products and the row blocks of the MLP as the packed kernels run them (ENGINE_BLOCKED_MLP=0:
// the packed products one after another over all rows, to measure the blocking alone).
bool blocked_rows(const torch::Tensor& rows) { return packed_rows(rows) && !switched_off("ENGINE_BLOCKED_MLP"); }

// h = t W1^T + b1, a = gelu(h), y = a W2^T + b2 (the biases preloaded into the GEMM outputs, as
// addmm does: OpenBLAS would zero them otherwise, the same pass), then the tail. Returns out's
// rows [M, C]; with `keep`, h (the pre-activation), a and y stay for the backward.
torch::Tensor forward_rows(const torch::Tensor& t_rows, const torch::Tensor& x_rows, const torch::Tensor& w1,
                           const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                           const torch::Tensor& gamma, const torch::Tensor& s, int64_t hw, bool keep,
                           torch::Tensor& h, torch::Tensor& a, torch::Tensor& y) {
  if (blocked_rows(t_rows)) return forward_rows_blocked(t_rows, x_rows, w1, b1, w2, b2, gamma, s, hw, keep, h, a, y);
  const int64_t rows = t_rows.size(0), c = t_rows.size(1);
  h = linear_rows(t_rows, w1, b1);
  if (packed_rows(t_rows)) {  // the blocked path switched off: its GELU kernel, to measure the blocking alone
    a = torch::empty_like(h);
    const float* hd = h.data_ptr<float>();
    float* ad = a.data_ptr<float>();
    for_chunks(rows, [&](int64_t, int64_t r0, int64_t r1) {
      gelu_span_float(hd + r0 * h.size(1), ad + r0 * h.size(1), (r1 - r0) * h.size(1));
    });
  } else {
    a = gelu_exact(h);  // no gradient recorded here: a custom Function's forward, or grad mode off
  }
  y = linear_rows(a, w2, b2);
  torch::Tensor out = torch::empty({rows, c}, y.options());
  auto kernel = tail_forward();
  for_chunks(rows, [&](int64_t, int64_t r0, int64_t r1) {
    kernel(x_rows.data_ptr<float>(), y.data_ptr<float>(), gamma.data_ptr<float>(), s.data_ptr<float>(),
           out.data_ptr<float>(), r0, r1, hw, c);
  });
  return out;
}

// A zeroed gradient for weight w: in the step's gradient memory where it is open, else new.
torch::Tensor zeroed_gradient(const torch::Tensor& w) {
  torch::Tensor g = claim_gradient_memory(w);
  return g.defined() && g.is_contiguous() ? g.zero_() : torch::zeros(w.sizes(), w.options());
}

// Which gradients the backward computes, and what it returns.
struct MlpNeeds {
  bool t, w1, b1, w2, b2, gamma;
  bool h() const { return t || w1 || b1; }
};
struct MlpGrads {
  torch::Tensor t_rows, w1, b1, w2, b2, gamma;
};

// The backward where the packed kernels run on one thread: chunk by chunk (kChunk rows) the tail,
// fc2's weight gradient, gy W2 with the GELU pass, fc1's weight gradient and the input gradient,
// the chunk's gy and gh in two scratch buffers that stay in cache (the whole-matrix products read
// gy and gh back from memory: 4 MB of gh for a stage-0 batch of 64). Each weight gradient adds the
// chunks' sums in turn, the 256-row blocks gemm_at_b adds: the same bits as the products over all
// rows (tests/components/models/convnext_mlp_test.cpp).
bool chunked_backward(const torch::Tensor& g_rows) { return blocked_rows(g_rows) && at::get_num_threads() == 1; }
MlpGrads backward_in_chunks(const torch::Tensor& g_rows, const torch::Tensor& t_rows, const torch::Tensor& h,
                            const torch::Tensor& a, const torch::Tensor& y, const torch::Tensor& w1,
                            const torch::Tensor& w2, const torch::Tensor& gamma, const torch::Tensor& s, int64_t hw,
                            const MlpNeeds& need) {
  const int64_t rows = g_rows.size(0), c = g_rows.size(1), d = h.size(1), chunks = chunks_of(rows);
  const int64_t ldt = t_rows.stride(0);
  const auto opts = g_rows.options();
  MlpGrads out;
  torch::Tensor gy = torch::empty({kChunk, c}, opts), gh = torch::empty({kChunk, d}, opts);
  torch::Tensor part = torch::zeros({2, chunks, c}, opts), part1 = torch::zeros({chunks, d}, opts);
  if (need.w2) out.w2 = zeroed_gradient(w2);
  if (need.w1) out.w1 = zeroed_gradient(w1);
  if (need.t) out.t_rows = torch::empty({rows, c}, opts);
  const torch::Tensor m1 = as_matrix(w1), m2 = as_matrix(w2);
  const PackedB p2 = need.h() ? PackedB::in_place(m2.data_ptr<float>(), c, d, m2.stride(0)) : PackedB();
  const PackedB p1 = need.t ? PackedB::in_place(m1.data_ptr<float>(), d, c, m1.stride(0)) : PackedB();
  auto tail = tail_backward();
  float *gyd = gy.data_ptr<float>(), *ghd = gh.data_ptr<float>(), *pd = part.data_ptr<float>();
  const float *hd = h.data_ptr<float>(), *ad = a.data_ptr<float>(), *td = t_rows.data_ptr<float>();
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t r0 = k * kChunk, n = std::min(rows, r0 + kChunk) - r0;
    tail(g_rows.data_ptr<float>(), y.data_ptr<float>(), gamma.data_ptr<float>(), s.data_ptr<float>(), gyd,
         pd + k * c, pd + (chunks + k) * c, r0, r0 + n, hw, c);
    if (need.w2) gemm_at_b_add_serial(n, gyd, c, c, ad + r0 * d, d, d, out.w2.data_ptr<float>(), d);
    if (!need.h()) continue;
    gemm_packed_serial(n, gyd, c, p2, nullptr, ghd, d);
    gelu_grad_rows(hd + r0 * d, ghd, part1.data_ptr<float>() + k * d, n, d);
    if (need.w1) gemm_at_b_add_serial(n, ghd, d, d, td + r0 * ldt, ldt, c, out.w1.data_ptr<float>(), c);
    if (need.t) gemm_packed_serial(n, ghd, d, p1, nullptr, out.t_rows.data_ptr<float>() + r0 * c, c);
  }
  if (need.b2) out.b2 = sum_partials(part[0]);
  if (need.gamma) out.gamma = sum_partials(part[1]);
  if (need.b1) out.b1 = sum_partials(part1);
  return out;
}

torch::Tensor to_nchw(const torch::Tensor& rows, const Shape& sh) {  // channels-last NCHW view
  return rows.view({sh.n, sh.h, sh.w, sh.c}).permute({0, 3, 1, 2});
}

struct MlpResidual : public torch::autograd::Function<MlpResidual> {
  // s: [N] per-sample drop-path scale (ones without drop path); needs no gradient.
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor t, torch::Tensor w1,
                               torch::Tensor b1, torch::Tensor w2, torch::Tensor b2, torch::Tensor gamma,
                               torch::Tensor s) {
    const Shape sh{x.size(0), x.size(1), x.size(2), x.size(3)};
    torch::Tensor t_rows = rows_of(t), h, a, y;
    torch::Tensor out = forward_rows(t_rows, rows_of(x), w1, b1, w2, b2, gamma, s, sh.h * sh.w, true, h, a, y);
    ctx->save_for_backward({t, w1, w2, gamma, s});  // inputs: autograd checks nothing changed them
    ctx->saved_data["h"] = h;                       // the function's own intermediates
    ctx->saved_data["a"] = a;
    ctx->saved_data["y"] = y;
    ctx->saved_data["shape"] = std::vector<int64_t>{sh.n, sh.c, sh.h, sh.w};
    return to_nchw(out, sh);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &w1 = saved[1], &w2 = saved[2], &gamma = saved[3], &s = saved[4];
    torch::Tensor t_rows = rows_of(saved[0]), h = ctx->saved_data["h"].toTensor();
    torch::Tensor a = ctx->saved_data["a"].toTensor(), y = ctx->saved_data["y"].toTensor();
    const auto v = ctx->saved_data["shape"].toIntVector();
    const Shape sh{v[0], v[1], v[2], v[3]};
    const int64_t rows = sh.rows(), c = sh.c, d = h.size(1), chunks = chunks_of(rows);
    torch::Tensor g = grads[0];
    torch::Tensor g_rows = g.permute({0, 2, 3, 1}).contiguous().view({rows, c});  // a view when channels-last
    torch::Tensor gx = ctx->needs_input_grad(0) ? g : torch::Tensor();
    if (chunked_backward(g_rows)) {
      const MlpNeeds need{ctx->needs_input_grad(1), ctx->needs_input_grad(2), ctx->needs_input_grad(3),
                          ctx->needs_input_grad(4), ctx->needs_input_grad(5), ctx->needs_input_grad(6)};
      MlpGrads r = backward_in_chunks(g_rows, t_rows, h, a, y, w1, w2, gamma, s, sh.h * sh.w, need);
      torch::Tensor gt = need.t ? to_nchw(r.t_rows, sh) : torch::Tensor();
      return {gx, gt, r.w1, r.b1, r.w2, r.b2, r.gamma, torch::Tensor()};
    }

    // The tail: gy, and the fc2 bias and gamma gradients (chunk partials).
    torch::Tensor gy = torch::empty({rows, c}, g.options());
    torch::Tensor part = torch::zeros({2, chunks, c}, g.options());
    auto kernel = tail_backward();
    float* pd = part.data_ptr<float>();
    for_chunks(rows, [&](int64_t k, int64_t r0, int64_t r1) {
      kernel(g_rows.data_ptr<float>(), y.data_ptr<float>(), gamma.data_ptr<float>(), s.data_ptr<float>(),
             gy.data_ptr<float>() + r0 * c, pd + k * c, pd + (chunks + k) * c, r0, r1, sh.h * sh.w, c);
    });
    torch::Tensor gw1, gb1, gw2, gb2, ggamma, gt;
    if (ctx->needs_input_grad(5)) gb2 = sum_partials(part[0]);
    if (ctx->needs_input_grad(6)) ggamma = sum_partials(part[1]);
    if (ctx->needs_input_grad(4)) gw2 = weight_grad(gy, a, w2.sizes(), claim_gradient_memory(w2));
    const bool need_h = ctx->needs_input_grad(1) || ctx->needs_input_grad(2) || ctx->needs_input_grad(3);
    if (need_h) {
      // ga = gy W2, then in place gh = ga * gelu'(h) with the fc1 bias gradient's partials; where the
      // packed kernels run, chunk by chunk, each chunk's ga still in cache for the GELU pass.
      const bool blocked = blocked_rows(gy);
      torch::Tensor gh = blocked ? torch::empty({rows, d}, g.options()) : rows_times(gy, w2);
      const torch::Tensor m2 = as_matrix(w2);
      const PackedB p2 = blocked ? PackedB::in_place(m2.data_ptr<float>(), c, d, m2.stride(0)) : PackedB();
      torch::Tensor part1 = torch::zeros({chunks, d}, g.options());
      float *ghd = gh.data_ptr<float>(), *p1 = part1.data_ptr<float>();
      const float *hd = h.data_ptr<float>(), *gyd = gy.data_ptr<float>();
      for_chunks(rows, [&](int64_t k, int64_t r0, int64_t r1) {
        if (blocked) gemm_packed_serial(r1 - r0, gyd + r0 * c, c, p2, nullptr, ghd + r0 * d, d);
        gelu_grad_rows(hd + r0 * d, ghd + r0 * d, p1 + k * d, r1 - r0, d);
      });
      if (ctx->needs_input_grad(3)) gb1 = sum_partials(part1);
      if (ctx->needs_input_grad(2)) gw1 = weight_grad(gh, t_rows, w1.sizes(), claim_gradient_memory(w1));
      if (ctx->needs_input_grad(1)) gt = to_nchw(rows_times(gh, w1), sh);
    }
    return {gx, gt, gw1, gb1, gw2, gb2, ggamma, torch::Tensor()};
  }
};

bool channels_last_float(const torch::Tensor& x) {
  return cpu_float(x) && x.dim() == 4 && x.is_contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

torch::Tensor convnext_mlp_residual(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& w1,
                                    const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                                    const torch::Tensor& gamma, double drop_path, bool training) {
  const int64_t c = x.dim() == 4 ? x.size(1) : -1;
  const bool applies = !switched_off("ENGINE_FUSED_MLP") && channels_last_float(x) &&
                       channels_last_float(t) && t.sizes() == x.sizes() && w1.dim() >= 2 && w1.size(1) == c &&
                       w2.dim() >= 2 && w2.size(0) == c && w2.size(1) == w1.size(0) &&
                       b1.numel() == w1.size(0) && b2.numel() == c && gamma.numel() == c;
  if (!applies) return {};
  for (const auto* p : {&w1, &b1, &w2, &b2, &gamma})
    if (!cpu_float(*p) || !p->is_contiguous()) return {};
  RECORD_FUNCTION("engine::convnext_mlp_residual", std::vector<c10::IValue>({x}));
  torch::Tensor mask = drop_path_scale(x, drop_path, training);  // [N, 1, 1, 1], or undefined
  torch::Tensor s = mask.defined() ? mask.view({-1}) : torch::ones({x.size(0)}, x.options());
  const bool grad = torch::GradMode::is_enabled() &&
                    (x.requires_grad() || t.requires_grad() || w1.requires_grad() || b1.requires_grad() ||
                     w2.requires_grad() || b2.requires_grad() || gamma.requires_grad());
  if (grad) return MlpResidual::apply(x, t, w1, b1, w2, b2, gamma, s);
  const Shape sh{x.size(0), c, x.size(2), x.size(3)};
  torch::Tensor h, a, y;
  return to_nchw(forward_rows(rows_of(t), rows_of(x), w1, b1, w2, b2, gamma, s, sh.h * sh.w, false, h, a, y), sh);
}

}  // namespace engine
