#include "components/models/packed_gemm.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <type_traits>

#include "engine/core/env.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ENGINE_PACKED_GEMM_X86 1
#endif

namespace engine {

bool packed_gemm_available() {
#ifdef ENGINE_PACKED_GEMM_X86
  static const bool on = __builtin_cpu_supports("avx512f") && !switched_off("ENGINE_PACKED_GEMM");
  return on;
#else
  return false;
#endif
}

bool packed_gemm_pays(int64_t m) { return m >= 128; }

PackedB::PackedB(int64_t k, int64_t n) : k_(k), n_(n), data_(new float[static_cast<size_t>(panels() * kPanel * k)]) {}

#ifdef ENGINE_PACKED_GEMM_X86
namespace {

// The first min(lanes, 16) lanes of a 16-float vector (lanes >= 1).
__mmask16 lane_mask(int64_t lanes) { return static_cast<__mmask16>(lanes >= 16 ? 0xffff : (1u << lanes) - 1); }

// GCC 12 sees the undefined pass-through operand inside _mm512_unpacklo_ps & co. as maybe used.
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// dst[i * ldd + j] = src[j * lds + i] for i < 16, j < 16 (a 16 x 16 tile of floats transposed in
// registers): rows j >= rows of src read as zeros, only columns i < cols of src read and only
// those rows of dst written.
__attribute__((target("avx512f"))) void transpose_tile(const float* src, int64_t lds, int64_t rows, int64_t cols,
                                                       float* dst, int64_t ldd) {
  const __mmask16 cmask = lane_mask(cols);
  __m512 r[16], t[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) r[j] = j < rows ? _mm512_maskz_loadu_ps(cmask, src + j * lds) : _mm512_setzero_ps();
  // 32-bit, then 64-bit interleaves within 128-bit lanes: r[4q + c] holds columns c, 4 + c,
  // 8 + c, 12 + c (one per lane) of rows 4q .. 4q + 3.
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_ps(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_ps(r[2 * j], r[2 * j + 1]);
  }
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512d a = _mm512_castps_pd(t[4 * q]), b = _mm512_castps_pd(t[4 * q + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * q + 1]), d = _mm512_castps_pd(t[4 * q + 3]);
    r[4 * q] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    r[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    r[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    r[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // Then whole lanes: column c of the tile gathers lane c / 4 of r[c % 4], r[4 + c % 4], ...
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), u1 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
    t[c] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    t[8 + c] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    t[4 + c] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)
    if (i < cols) _mm512_storeu_ps(dst + i * ldd, t[i]);
}
#pragma GCC diagnostic pop

}  // namespace
#endif

PackedB PackedB::transposed(const float* w, int64_t n, int64_t k, int64_t ldw) {
  PackedB out;
  transposed_each({w}, n, k, ldw, {&out});
  return out;
}

void PackedB::transposed_each(const std::vector<const float*>& w, int64_t n, int64_t k, int64_t ldw,
                              const std::vector<PackedB*>& out) {
  TORCH_CHECK(w.size() == out.size(), "PackedB::transposed_each: ", w.size(), " weights for ", out.size(),
              " outputs");
  for (PackedB* o : out) *o = PackedB(k, n);
  const int64_t panels = out.empty() ? 0 : out[0]->panels();
  // Tasks (matrix, panel), at least 16 K floats to a thread (a 512 x 512 weight is 8 panels of 128 KB).
  at::parallel_for(0, static_cast<int64_t>(out.size()) * panels,
                   std::max<int64_t>(1, 16384 / (kPanel * std::max<int64_t>(1, k))),
                   [&](int64_t first, int64_t end) {
                     for (int64_t u = first; u < end; ++u)
                       out[u / panels]->pack_panels(w[u / panels], ldw, u % panels, u % panels + 1);
                   });
}

void PackedB::pack_panels(const float* w, int64_t ldw, int64_t first, int64_t end) {
  const int64_t k = k_;
  for (int64_t p = first; p < end; ++p) {
    const int64_t n0 = p * kPanel, width = this->width(p), wp = padded_width(p);
    float* dst = data_.get() + p * kPanel * k;
#ifdef ENGINE_PACKED_GEMM_X86
    if (__builtin_cpu_supports("avx512f")) {
      for (int64_t j0 = 0; j0 < wp; j0 += 16)
        for (int64_t k0 = 0; k0 < k; k0 += 16)
          transpose_tile(w + (n0 + j0) * ldw + k0, ldw, std::min<int64_t>(16, width - j0),
                         std::min<int64_t>(16, k - k0), dst + k0 * wp + j0, wp);
      continue;
    }
#endif
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t j = 0; j < wp; ++j) dst[kk * wp + j] = j < width ? w[(n0 + j) * ldw + kk] : 0.f;
  }
}

PackedB PackedB::in_place(const float* b, int64_t k, int64_t n, int64_t ldb) {
  PackedB out;
  out.k_ = k;
  out.n_ = n;
  out.in_place_ = b;
  out.ldb_ = ldb;
  return out;
}

#ifdef ENGINE_PACKED_GEMM_X86
namespace {

// The rows left after the full groups (left < 12): the kernel instance for that count, CALL(n),
// where n is below the group size `limit`.
#define ENGINE_REMAINDER_CASE(n, limit, CALL) \
  case n:                                     \
    if constexpr (n < (limit)) CALL(n);       \
    break;
#define ENGINE_REMAINDER_SWITCH(left, limit, CALL) \
  switch (left) {                                  \
    ENGINE_REMAINDER_CASE(1, limit, CALL)          \
    ENGINE_REMAINDER_CASE(2, limit, CALL)          \
    ENGINE_REMAINDER_CASE(3, limit, CALL)          \
    ENGINE_REMAINDER_CASE(4, limit, CALL)          \
    ENGINE_REMAINDER_CASE(5, limit, CALL)          \
    ENGINE_REMAINDER_CASE(6, limit, CALL)          \
    ENGINE_REMAINDER_CASE(7, limit, CALL)          \
    ENGINE_REMAINDER_CASE(8, limit, CALL)          \
    ENGINE_REMAINDER_CASE(9, limit, CALL)          \
    ENGINE_REMAINDER_CASE(10, limit, CALL)         \
    ENGINE_REMAINDER_CASE(11, limit, CALL)         \
    default:                                       \
      break;                                       \
  }

// Rows per register tile of V vectors: 24 accumulators at most (6 x 4, 8 x 3), 12 for narrower tiles.
constexpr int tile_rows(int vectors) { return vectors == 4 ? 6 : vectors == 3 ? 8 : 12; }

// acc[r][v] += s[r * step] * b[16v ..] for r < R, v < V: one rank-1 update of a tile of
// accumulators (the last vector of b read in the lanes of `last`).
template <int R, int V>
__attribute__((target("avx512f"), always_inline)) inline void rank1_update(__m512 (&acc)[R][V], const float* s,
                                                                         int64_t step, const float* b,
                                                                         __mmask16 last) {
  __m512 bv[V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(v == V - 1 ? last : __mmask16(0xffff), b + 16 * v);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    const __m512 sr = _mm512_set1_ps(s[r * step]);
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(sr, bv[v], acc[r][v]);
  }
}

// One term of a panel's sum: A's rows from `a` (lda apart; row 0 of the rows being computed) times
// the panel of B at `b` (k rows, ldb apart).
struct PanelTerm {
  const float* a;
  const float* b;
  int64_t ldb, k;
};

// MR rows x V vectors of 16 columns: MR * V accumulators in zmm registers (24 at most, of 32), V
// loads of B's panel row (rows ldb apart) and MR broadcasts of A's elements per step of k, over
// every term in turn (the accumulators stay in registers from the first term to the last). `last`:
// the lanes of the V-th vector that are real columns (the panel's width need not be a multiple of
// 16); only those are read, so that a panel read in place never reads past B.
template <int MR, int V>
__attribute__((target("avx512f"), always_inline)) inline void micro_kernel(const PanelTerm* terms, int count,
                                                                         int64_t row, int64_t lda,
                                                                         const float* bias, float* c,
                                                                         int64_t ldc, __mmask16 last,
                                                                         GemmEpilogue e) {
  // Every loop over r and v fully unrolled (the accumulators must stay in registers at any -O).
  __m512 acc[MR][V];
#pragma GCC unroll 4
  for (int v = 0; v < V; ++v) {
    const __mmask16 lanes = v == V - 1 ? last : __mmask16(0xffff);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(lanes, bias + 16 * v) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) acc[r][v] = b0;
  }
  for (int t = 0; t < count; ++t) {
    const float *a = terms[t].a + row * lda, *bp = terms[t].b;
    const int64_t ldb = terms[t].ldb, k = terms[t].k;
#pragma GCC unroll 4
    for (int64_t kk = 0; kk < k; ++kk) rank1_update<MR, V>(acc, a + kk, lda, bp + kk * ldb, last);
  }
  if (e.residual) {  // e.residual: row 0 of this tile, laid out as c
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)
        acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xffff, e.residual + r * ldc + 16 * v));
  }
  if (e.relu) {
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v)  // torch's relu: NaN kept, -0 and negatives to +0
        acc[r][v] = _mm512_mask_mov_ps(acc[r][v], _mm512_cmp_ps_mask(acc[r][v], _mm512_setzero_ps(), _CMP_LE_OQ),
                                       _mm512_setzero_ps());
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == V - 1 ? last : 0xffff, acc[r][v]);
}

// `e` moved by `offset` elements (its residual laid out as C).
GemmEpilogue shifted(GemmEpilogue e, int64_t offset) {
  if (e.residual) e.residual += offset;
  return e;
}

// Rows [0, m) of one panel, MR at a time, the remainder with a smaller kernel.
template <int V>
__attribute__((target("avx512f"))) void panel_rows(const PanelTerm* terms, int count, int64_t lda, const float* bias,
                                                   float* c, int64_t ldc, int64_t m, __mmask16 last, GemmEpilogue e) {
  constexpr int MR = tile_rows(V);
  int64_t r = 0;
  for (; r + MR <= m; r += MR)
    micro_kernel<MR, V>(terms, count, r, lda, bias, c + r * ldc, ldc, last, shifted(e, r * ldc));
  const int64_t left = m - r;
  c += r * ldc;
  e = shifted(e, r * ldc);
#define ENGINE_CALL(n) micro_kernel<n, V>(terms, count, r, lda, bias, c, ldc, last, e)
  ENGINE_REMAINDER_SWITCH(left, MR, ENGINE_CALL)
#undef ENGINE_CALL
}

// Rows per task: a block of A (96 rows) is reused from cache across B's panels, and each panel
// (k x 64 floats) across the block's row groups.
constexpr int64_t kRowBlock = 96;

// C's rows [0, m) = sum over the terms of A_t B_t (+ bias), panel by panel of C's columns [p0, p1).
void gemm_rows(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias, float* c, int64_t ldc,
               int64_t p0, int64_t p1, GemmEpilogue e) {
  const PackedB& b0 = *terms[0].b;
  PanelTerm panel_terms[kMaxGemmTerms];
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * PackedB::kPanel, width = b0.width(p), vectors = b0.padded_width(p) / 16;
    const __mmask16 last = lane_mask(width - 16 * (vectors - 1));
    const float* bias_p = bias ? bias + n0 : nullptr;
    for (int t = 0; t < count; ++t) {
      const PackedB& b = *terms[t].b;
      panel_terms[t] = PanelTerm{terms[t].a, b.panel(p), b.row_stride(p), b.k()};
    }
    switch (vectors) {
      case 1:
        panel_rows<1>(panel_terms, count, lda, bias_p, c + n0, ldc, m, last, shifted(e, n0));
        break;
      case 2:
        panel_rows<2>(panel_terms, count, lda, bias_p, c + n0, ldc, m, last, shifted(e, n0));
        break;
      case 3:
        panel_rows<3>(panel_terms, count, lda, bias_p, c + n0, ldc, m, last, shifted(e, n0));
        break;
      default:
        panel_rows<4>(panel_terms, count, lda, bias_p, c + n0, ldc, m, last, shifted(e, n0));
        break;
    }
  }
}

// The weight-gradient tile: C[r][16v ..] += sum over rows i < m of g[i * ldg + r] * x[i * ldx + 16v ..]
// for r < R, v < V (the last vector's real lanes in `last`).
template <int R, int V>
__attribute__((target("avx512f"), always_inline)) inline void at_b_tile(int64_t m, const float* g, int64_t ldg,
                                                                      const float* x, int64_t ldx, float* c,
                                                                      int64_t ldc, __mmask16 last) {
  __m512 acc[R][V];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t i = 0; i < m; ++i) rank1_update<R, V>(acc, g + i * ldg, 1, x + i * ldx, last);
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) {
      const __mmask16 lanes = v == V - 1 ? last : 0xffff;
      float* cp = c + r * ldc + 16 * v;
      _mm512_mask_storeu_ps(cp, lanes, _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, cp), acc[r][v]));
    }
}

// C's rows [n0, n1) from one block of m rows, C's columns in panels of up to 64.
template <int V>
__attribute__((target("avx512f"))) void at_b_panel(int64_t m, const float* g, int64_t ldg, int64_t n0, int64_t n1,
                                                   const float* x, int64_t ldx, float* c, int64_t ldc,
                                                   __mmask16 last) {
  constexpr int R = tile_rows(V);
  int64_t r = n0;
  for (; r + R <= n1; r += R) at_b_tile<R, V>(m, g + r, ldg, x, ldx, c + r * ldc, ldc, last);
  const int64_t left = n1 - r;
  g += r;
  c += r * ldc;
#define ENGINE_CALL(n) at_b_tile<n, V>(m, g, ldg, x, ldx, c, ldc, last)
  ENGINE_REMAINDER_SWITCH(left, R, ENGINE_CALL)
#undef ENGINE_CALL
}

// The weight-gradient tile over a sum of terms: C[r][16v ..] (= its value when `add`, else 0) plus,
// term after term, the sum over the term's rows i of g[i * ldg + col + r] * x[i * ldx + k0 + 16v ..].
template <int R, int V>
__attribute__((target("avx512f"), always_inline)) inline void at_b_sum_tile(const AtBTerm* terms, int64_t count,
                                                                          int64_t col, int64_t ldg, int64_t k0,
                                                                          int64_t ldx, float* c, int64_t ldc,
                                                                          __mmask16 last, bool add) {
  __m512 acc[R][V];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      acc[r][v] = add ? _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xffff, c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t t = 0; t < count; ++t) {
    const float *g = terms[t].g + col, *x = terms[t].x + k0;
    const int64_t rows = terms[t].rows;
#pragma GCC unroll 2
    for (int64_t i = 0; i < rows; ++i) rank1_update<R, V>(acc, g + i * ldg, 1, x + i * ldx, last);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == V - 1 ? last : 0xffff, acc[r][v]);
}

// C's rows [n0, n1), columns [k0, k0 + 16 V) (c: C's row 0, column 0) over the terms.
template <int V>
__attribute__((target("avx512f"))) void at_b_sum_panel(const AtBTerm* terms, int64_t count, int64_t ldg, int64_t n0,
                                                       int64_t n1, int64_t k0, int64_t ldx, float* c, int64_t ldc,
                                                       __mmask16 last, bool add) {
  constexpr int R = tile_rows(V);
  int64_t r = n0;
  for (; r + R <= n1; r += R) at_b_sum_tile<R, V>(terms, count, r, ldg, k0, ldx, c + r * ldc + k0, ldc, last, add);
  const int64_t left = n1 - r;
  c += r * ldc + k0;
#define ENGINE_CALL(n) at_b_sum_tile<n, V>(terms, count, r, ldg, k0, ldx, c, ldc, last, add)
  ENGINE_REMAINDER_SWITCH(left, R, ENGINE_CALL)
#undef ENGINE_CALL
}

// Calls f(k0, last, std::integral_constant<int, V>{}) for each panel of up to 64 of C's k columns: V
// vectors of 16 floats, the real lanes of the last one in `last` (the weight-gradient kernels' panels).
template <class F>
void for_each_column_panel(int64_t k, F f) {
  for (int64_t k0 = 0; k0 < k; k0 += PackedB::kPanel) {
    const int64_t width = std::min(PackedB::kPanel, k - k0), vectors = (width + 15) / 16;
    const __mmask16 last = lane_mask(width - 16 * (vectors - 1));
    switch (vectors) {
      case 1:
        f(k0, last, std::integral_constant<int, 1>{});
        break;
      case 2:
        f(k0, last, std::integral_constant<int, 2>{});
        break;
      case 3:
        f(k0, last, std::integral_constant<int, 3>{});
        break;
      default:
        f(k0, last, std::integral_constant<int, 4>{});
        break;
    }
  }
}

}  // namespace
#endif

void gemm_packed_sum_panels_serial(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias,
                                   float* c, int64_t ldc, int64_t p0, int64_t p1, GemmEpilogue epilogue) {
  TORCH_CHECK(count >= 1 && count <= kMaxGemmTerms, "gemm_packed_sum: ", count, " terms (1 to ", kMaxGemmTerms, ")");
  for (int t = 1; t < count; ++t)
    TORCH_CHECK(terms[t].b->n() == terms[0].b->n(), "gemm_packed_sum: the terms' B differ in columns");
  TORCH_CHECK(0 <= p0 && p0 <= p1 && p1 <= terms[0].b->panels(), "gemm_packed_sum: panels [", p0, ", ", p1, ") of ",
              terms[0].b->panels());
#ifdef ENGINE_PACKED_GEMM_X86
  GemmTerm block[kMaxGemmTerms];
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    for (int t = 0; t < count; ++t) block[t] = GemmTerm{terms[t].a + r0 * lda, terms[t].b};
    gemm_rows(std::min(kRowBlock, m - r0), block, count, lda, bias, c + r0 * ldc, ldc, p0, p1,
              shifted(epilogue, r0 * ldc));
  }
#else
  (void)m, (void)lda, (void)bias, (void)c, (void)ldc, (void)epilogue;
#endif
}

void gemm_packed_sum_serial(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias, float* c,
                            int64_t ldc) {
  TORCH_CHECK(count >= 1, "gemm_packed_sum: ", count, " terms (1 to ", kMaxGemmTerms, ")");
  gemm_packed_sum_panels_serial(m, terms, count, lda, bias, c, ldc, 0, terms[0].b->panels());
}

void gemm_packed_serial(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c,
                        int64_t ldc) {
  const GemmTerm term{a, &b};
  gemm_packed_sum_serial(m, &term, 1, lda, bias, c, ldc);
}

void gemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c,
                 int64_t ldc) {
#ifdef ENGINE_PACKED_GEMM_X86
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t end) {
    const int64_t r0 = first * kRowBlock, r1 = std::min(m, end * kRowBlock);
    gemm_packed_serial(r1 - r0, a + r0 * lda, lda, b, bias, c + r0 * ldc, ldc);
  });
#else
  (void)m, (void)a, (void)lda, (void)b, (void)bias, (void)c, (void)ldc;
#endif
}

#ifdef ENGINE_PACKED_GEMM_X86
namespace {
// C's rows [n0, n1) += G^T X: every 256-row block of G and X in turn, each tile of C summing the
// block's rows in order and then added to C.
void at_b_band(int64_t m, const float* g, int64_t ldg, int64_t n0, int64_t n1, const float* x, int64_t ldx, int64_t k,
               float* c, int64_t ldc) {
  for (int64_t i0 = 0; i0 < m; i0 += kAtBBlockRows) {
    const int64_t rows = std::min(kAtBBlockRows, m - i0);
    for_each_column_panel(k, [&](int64_t k0, __mmask16 last, auto vectors) {
      at_b_panel<decltype(vectors)::value>(rows, g + i0 * ldg, ldg, n0, n1, x + i0 * ldx + k0, ldx, c + k0, ldc, last);
    });
  }
}
}  // namespace
#endif

void gemm_at_b_sum_serial(const AtBTerm* terms, int64_t count, int64_t ldg, int64_t n0, int64_t n1, int64_t ldx,
                          int64_t k, float* c, int64_t ldc) {
#ifdef ENGINE_PACKED_GEMM_X86
  if (count == 0) {
    for (int64_t r = n0; r < n1; ++r) std::fill(c + r * ldc, c + r * ldc + k, 0.f);
    return;
  }
  // Groups of terms of up to 2 * kAtBBlockRows rows (at least one term): their rows stay in L2 while every
  // tile of C's band passes over them; the first group writes C, the next ones add to it.
  for (int64_t t0 = 0; t0 < count;) {
    int64_t t1 = t0 + 1, rows = terms[t0].rows;
    while (t1 < count && rows + terms[t1].rows <= 2 * kAtBBlockRows) rows += terms[t1++].rows;
    for_each_column_panel(k, [&](int64_t k0, __mmask16 last, auto vectors) {
      at_b_sum_panel<decltype(vectors)::value>(terms + t0, t1 - t0, ldg, n0, n1, k0, ldx, c, ldc, last, t0 > 0);
    });
    t0 = t1;
  }
#else
  (void)terms, (void)count, (void)ldg, (void)n0, (void)n1, (void)ldx, (void)k, (void)c, (void)ldc;
#endif
}

void gemm_at_b(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k, float* c,
               int64_t ldc) {
#ifdef ENGINE_PACKED_GEMM_X86
  for (int64_t r = 0; r < n; ++r) std::fill(c + r * ldc, c + r * ldc + k, 0.f);
  // Threads take 12-row bands of C; each band sums every block of rows in order.
  const int64_t bands = (n + 11) / 12;
  at::parallel_for(0, bands, 1, [&](int64_t first, int64_t end) {
    at_b_band(m, g, ldg, first * 12, std::min(n, end * 12), x, ldx, k, c, ldc);
  });
#else
  (void)m, (void)g, (void)ldg, (void)n, (void)x, (void)ldx, (void)k, (void)c, (void)ldc;
#endif
}

void gemm_at_b_add_serial(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k,
                          float* c, int64_t ldc) {
#ifdef ENGINE_PACKED_GEMM_X86
  at_b_band(m, g, ldg, 0, n, x, ldx, k, c, ldc);
#else
  (void)m, (void)g, (void)ldg, (void)n, (void)x, (void)ldx, (void)k, (void)c, (void)ldc;
#endif
}

}  // namespace engine
