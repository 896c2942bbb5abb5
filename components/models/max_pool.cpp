#include "components/models/max_pool.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <vector>

#include "components/models/simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

// Measured (resnet34 at 28 x 28, evaluation forward, batch 128, 1 thread, build/bench_eval_forward):
// see bench/RESULTS.md, "resnet34's evaluation past 3x".

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The window is at most kMaxTaps taps (kernel <= 8); larger ones go to torch.
constexpr int64_t kMaxKernel = 8, kMaxTaps = kMaxKernel * kMaxKernel;

struct PoolGeometry {
  int64_t n, c, h, w, k, s, p, ho, wo;
};

// The taps of output (oy, ox)'s window that lie on the map, in window order (row by row): their
// offsets into one NHWC image (channel 0), and their indices ky * k + kx. Returns their count.
int window_taps(const PoolGeometry& g, int64_t oy, int64_t ox, std::array<int64_t, kMaxTaps>& offset,
                std::array<int32_t, kMaxTaps>& id) {
  const int64_t y0 = oy * g.s - g.p, x0 = ox * g.s - g.p;
  int count = 0;
  for (int64_t ky = std::max<int64_t>(0, -y0); ky < std::min(g.k, g.h - y0); ++ky)
    for (int64_t kx = std::max<int64_t>(0, -x0); kx < std::min(g.k, g.w - x0); ++kx) {
      offset[count] = ((y0 + ky) * g.w + x0 + kx) * g.c;
      id[count++] = static_cast<int32_t>(ky * g.k + kx);
    }
  return count;
}

// y[j] = the maximum of tap[t][j] over the taps, the first one in window order on ties, NaN taken
// (torch's rule: a tap replaces the maximum when greater or NaN); id[j] = that tap's index (when id).
// Channels [j0, c) one at a time (the rest after the vector code, or all of them).
inline void max_over_taps_scalar(const float* const* tap, const int32_t* ids, int taps, int64_t j0, int64_t c, float* y,
                                 int32_t* id) {
  for (int64_t j = j0; j < c; ++j) {
    float m = tap[0][j];
    int32_t best = ids[0];
    for (int t = 1; t < taps; ++t) {
      const float v = tap[t][j];
      if (v > m || v != v) {
        m = v;
        best = ids[t];
      }
    }
    y[j] = m;
    if (id) id[j] = best;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// 16 channels at a time: a mask of the lanes where the tap is greater or NaN selects (GCC's vector
// extension turned the same select into scalar code, 9-11% of resnet34's evaluation).
__attribute__((target("avx512f"))) void max_over_taps_avx512(const float* const* tap, const int32_t* ids, int taps,
                                                             int64_t c, float* y, int32_t* id) {
  int64_t j = 0;
  for (; j + 16 <= c; j += 16) {
    __m512 m = _mm512_loadu_ps(tap[0] + j);
    __m512i best = _mm512_set1_epi32(ids[0]);
    for (int t = 1; t < taps; ++t) {
      const __m512 v = _mm512_loadu_ps(tap[t] + j);
      const __mmask16 take = _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      m = _mm512_mask_mov_ps(m, take, v);
      best = _mm512_mask_mov_epi32(best, take, _mm512_set1_epi32(ids[t]));
    }
    _mm512_storeu_ps(y + j, m);
    if (id) _mm512_storeu_si512(id + j, best);
  }
  max_over_taps_scalar(tap, ids, taps, j, c, y, id);
}

// 8 channels at a time, the same select as a blend.
__attribute__((target("avx2"))) void max_over_taps_avx2(const float* const* tap, const int32_t* ids, int taps,
                                                        int64_t c, float* y, int32_t* id) {
  int64_t j = 0;
  for (; j + 8 <= c; j += 8) {
    __m256 m = _mm256_loadu_ps(tap[0] + j);
    __m256i best = _mm256_set1_epi32(ids[0]);
    for (int t = 1; t < taps; ++t) {
      const __m256 v = _mm256_loadu_ps(tap[t] + j);
      const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v, take);
      best = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(best), _mm256_castsi256_ps(_mm256_set1_epi32(ids[t])), take));
    }
    _mm256_storeu_ps(y + j, m);
    if (id) _mm256_storeu_si256(reinterpret_cast<__m256i*>(id + j), best);
  }
  max_over_taps_scalar(tap, ids, taps, j, c, y, id);
}
#endif

using MaxOverTaps = void (*)(const float* const*, const int32_t*, int, int64_t, float*, int32_t*);

MaxOverTaps max_over_taps() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (simd::has_avx512f()) return &max_over_taps_avx512;
  if (simd::has_avx2()) return &max_over_taps_avx2;
#endif
  return [](const float* const* tap, const int32_t* ids, int taps, int64_t c, float* y, int32_t* id) {
    max_over_taps_scalar(tap, ids, taps, 0, c, y, id);
  };
}

// Output rows [b, e) of n * ho (image n, output row oy) of NHWC y (and the tap indices, when id).
void pool_rows(const PoolGeometry& g, const float* x, float* y, int32_t* id, int64_t b, int64_t e) {
  const MaxOverTaps kernel = max_over_taps();
  std::array<int64_t, kMaxTaps> offset;
  std::array<int32_t, kMaxTaps> ids;
  std::array<const float*, kMaxTaps> tap;
  for (int64_t r = b; r < e; ++r) {
    const int64_t n = r / g.ho, oy = r % g.ho;
    const float* image = x + n * g.h * g.w * g.c;
    for (int64_t ox = 0; ox < g.wo; ++ox) {
      const int taps = window_taps(g, oy, ox, offset, ids);
      for (int t = 0; t < taps; ++t) tap[t] = image + offset[t];
      const int64_t at = (r * g.wo + ox) * g.c;
      kernel(tap.data(), ids.data(), taps, g.c, y + at, id ? id + at : nullptr);
    }
  }
}

void max_pool_rows(const PoolGeometry& g, const float* x, float* y, int32_t* id) {
  at::parallel_for(0, g.n * g.ho, 1, [&](int64_t b, int64_t e) { pool_rows(g, x, y, id, b, e); });
}

// gx (NHWC, zeroed) += gy routed to each output's winning tap, in output order per image (torch's
// order: the same sums, the same bits). Parallel over images, whose windows share no pixel.
void max_unpool(const PoolGeometry& g, const float* gy, const int32_t* id, float* gx) {
  at::parallel_for(0, g.n, 1, [&](int64_t b, int64_t e) {
    std::array<int64_t, kMaxTaps> offset, by_id;
    std::array<int32_t, kMaxTaps> ids;
    for (int64_t n = b; n < e; ++n) {
      float* image = gx + n * g.h * g.w * g.c;
      for (int64_t oy = 0; oy < g.ho; ++oy)
        for (int64_t ox = 0; ox < g.wo; ++ox) {
          const int taps = window_taps(g, oy, ox, offset, ids);
          for (int t = 0; t < taps; ++t) by_id[ids[t]] = offset[t];
          const int64_t at = ((n * g.ho + oy) * g.wo + ox) * g.c;
          for (int64_t j = 0; j < g.c; ++j) image[by_id[id[at + j]] + j] += gy[at + j];
        }
    }
  });
}

PoolGeometry pool_geometry(const std::vector<int64_t>& v) {  // {n, c, h, w, k, s, p}: pool_sizes()'s order
  PoolGeometry g{v[0], v[1], v[2], v[3], v[4], v[5], v[6], 0, 0};
  g.ho = (g.h + 2 * g.p - g.k) / g.s + 1;  // floor mode
  g.wo = (g.w + 2 * g.p - g.k) / g.s + 1;
  return g;
}

std::vector<int64_t> pool_sizes(const torch::Tensor& x, int64_t k, int64_t s, int64_t p) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), k, s, p};
}

torch::Tensor pool_nhwc(const torch::Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }  // free if channels-last

struct MaxPoolNhwc : public torch::autograd::Function<MaxPoolNhwc> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t k, int64_t s, int64_t p) {
    const PoolGeometry g = pool_geometry(pool_sizes(x, k, s, p));
    torch::Tensor xh = pool_nhwc(x);
    torch::Tensor y = torch::empty({g.n, g.ho, g.wo, g.c}, x.options());
    torch::Tensor id = torch::empty({g.n, g.ho, g.wo, g.c}, x.options().dtype(torch::kInt));
    max_pool_rows(g, xh.data_ptr<float>(), y.data_ptr<float>(), id.data_ptr<int32_t>());
    ctx->saved_data["id"] = id;
    ctx->saved_data["sizes"] = pool_sizes(x, k, s, p);
    return y.permute({0, 3, 1, 2});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const PoolGeometry g = pool_geometry(ctx->saved_data["sizes"].toIntVector());
    torch::Tensor id = ctx->saved_data["id"].toTensor();
    torch::Tensor gy = pool_nhwc(grads[0]);
    torch::Tensor gx = torch::zeros({g.n, g.h, g.w, g.c}, gy.options());
    max_unpool(g, gy.data_ptr<float>(), id.data_ptr<int32_t>(), gx.data_ptr<float>());
    return {gx.permute({0, 3, 1, 2}), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor max_pool2d_nhwc(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const bool ours = simd::cpu_float(x) && x.dim() == 4 && x.is_contiguous(torch::MemoryFormat::ChannelsLast) &&
                    kernel >= 1 && kernel <= kMaxKernel && stride >= 1 && padding >= 0 && padding <= kernel / 2 &&
                    x.size(2) + 2 * padding >= kernel && x.size(3) + 2 * padding >= kernel && x.numel() > 0;
  if (!ours) return torch::max_pool2d(x, kernel, stride, padding);
  RECORD_FUNCTION("engine::max_pool2d_nhwc", std::vector<c10::IValue>({x}));
  if (torch::GradMode::is_enabled() && x.requires_grad()) return MaxPoolNhwc::apply(x, kernel, stride, padding);
  const PoolGeometry g = pool_geometry(pool_sizes(x, kernel, stride, padding));
  torch::Tensor y = torch::empty({g.n, g.ho, g.wo, g.c}, x.options());
  max_pool_rows(g, x.permute({0, 2, 3, 1}).contiguous().data_ptr<float>(), y.data_ptr<float>(), nullptr);
  return y.permute({0, 3, 1, 2});
}

}  // namespace engine
