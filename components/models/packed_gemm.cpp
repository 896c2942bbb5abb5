#include "components/models/packed_gemm.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "engine/core/env.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define ENGINE_PACKED_GEMM_X86 1
#endif

namespace engine {

namespace {

PackedGemmIsa widest_isa() {
#ifdef ENGINE_PACKED_GEMM_X86
  if (__builtin_cpu_supports("avx512f")) return PackedGemmIsa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PackedGemmIsa::avx2;
#endif
  return PackedGemmIsa::none;
}

}  // namespace

PackedGemmIsa packed_gemm_widest() {
  static const PackedGemmIsa widest = widest_isa();
  return widest;
}

namespace {
// The kernels in use: the widest the CPU has, as ENGINE_PACKED_GEMM narrows it (read once).
std::atomic<PackedGemmIsa>& isa_in_use() {
  static std::atomic<PackedGemmIsa> isa{[] {
    const char* env = std::getenv("ENGINE_PACKED_GEMM");
    if (switched_off("ENGINE_PACKED_GEMM")) return PackedGemmIsa::none;
    if (env && std::strcmp(env, "avx2") == 0 && packed_gemm_widest() >= PackedGemmIsa::avx2) return PackedGemmIsa::avx2;
    return packed_gemm_widest();
  }()};
  return isa;
}
}  // namespace

PackedGemmIsa packed_gemm_isa() { return isa_in_use().load(std::memory_order_relaxed); }

PackedGemmIsa use_packed_gemm_isa(PackedGemmIsa isa) {
  TORCH_CHECK(isa <= packed_gemm_widest(), "use_packed_gemm_isa: ", packed_gemm_isa_name(isa),
              " kernels need instructions this CPU lacks (it has ", packed_gemm_isa_name(packed_gemm_widest()), ")");
  return isa_in_use().exchange(isa);
}

const char* packed_gemm_isa_name(PackedGemmIsa isa) {
  switch (isa) {
    case PackedGemmIsa::avx512:
      return "AVX-512";
    case PackedGemmIsa::avx2:
      return "AVX2";
    default:
      return "none";
  }
}

bool packed_gemm_available() { return packed_gemm_isa() != PackedGemmIsa::none; }

bool packed_gemm_pays(int64_t m) { return m >= 128; }

void PackedB::Free::operator()(float* p) const { std::free(p); }

PackedB::PackedB(int64_t k, int64_t n, int64_t strip) : k_(k), n_(n), strip_(strip) {
  // 64-byte aligned: a strip row (64 bytes at 16 columns, or 256) then loads whole cache lines.
  const size_t bytes = static_cast<size_t>(panels() * kPanel * k) * sizeof(float);
  data_.reset(static_cast<float*>(std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64))));
  TORCH_CHECK(data_ != nullptr, "PackedB: out of memory for ", bytes, " bytes");
}

#ifdef ENGINE_PACKED_GEMM_X86
namespace {

// `e` moved by `offset` elements (its residual laid out as C).
GemmEpilogue shifted(GemmEpilogue e, int64_t offset) {
  if (e.residual) e.residual += offset;
  return e;
}

// The kernels at 16 floats a vector, 32 zmm registers: tiles of up to 4 vectors (64 columns) by 6
// rows (24 accumulators), 8 x 3, 12 x 2 or 12 x 1.
namespace avx512 {
#define ENGINE_KERNEL __attribute__((target("avx512f")))
#define ENGINE_VEC ENGINE_KERNEL __attribute__((always_inline)) static inline
struct Vec {
  using V = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16, kMaxVectors = 4;
  static constexpr int tile_rows(int vectors) { return vectors == 4 ? 6 : vectors == 3 ? 8 : 12; }
  ENGINE_VEC Mask mask(int64_t lanes) { return static_cast<Mask>(lanes >= 16 ? 0xffff : (1u << lanes) - 1); }
  ENGINE_VEC V zero() { return _mm512_setzero_ps(); }
  ENGINE_VEC V broadcast(const float* p) { return _mm512_set1_ps(*p); }
  ENGINE_VEC V loadu(const float* p) { return _mm512_loadu_ps(p); }
  ENGINE_VEC V load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  ENGINE_VEC void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  ENGINE_VEC void store(Mask m, float* p, V v) { _mm512_mask_storeu_ps(p, m, v); }
  ENGINE_VEC V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  ENGINE_VEC V add(V a, V b) { return _mm512_add_ps(a, b); }
  ENGINE_VEC V relu(V v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_setzero_ps());
  }
};
#include "components/models/packed_gemm_kernels.inc"

// GCC 12 sees the undefined pass-through operand inside _mm512_unpacklo_ps & co. as maybe used.
#pragma GCC diagnostic push
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// dst[i * ldd + j] = src[j * lds + i] for i < 16, j < 16 (a 16 x 16 tile of floats transposed in
// registers): rows j >= rows of src read as zeros, only columns i < cols of src read and only
// those rows of dst written.
ENGINE_KERNEL void transpose_tile(const float* src, int64_t lds, int64_t rows, int64_t cols,
                                  float* dst, int64_t ldd) {
  const __mmask16 cmask = Vec::mask(cols);
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
#undef ENGINE_VEC
#undef ENGINE_KERNEL
}  // namespace avx512

// The kernels at 8 floats a vector, 16 ymm registers: tiles of up to 2 vectors (16 columns) by 6 rows
// (12 accumulators, 2 vectors of B and a broadcast), or 12 x 1.
namespace avx2 {
#define ENGINE_KERNEL __attribute__((target("avx2,fma")))
#define ENGINE_VEC ENGINE_KERNEL __attribute__((always_inline)) static inline
struct Vec {
  using V = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8, kMaxVectors = 2;
  static constexpr int tile_rows(int vectors) { return vectors == 2 ? 6 : 12; }
  ENGINE_VEC Mask mask(int64_t lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(lanes, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  ENGINE_VEC V zero() { return _mm256_setzero_ps(); }
  ENGINE_VEC V broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  ENGINE_VEC V loadu(const float* p) { return _mm256_loadu_ps(p); }
  ENGINE_VEC V load(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  ENGINE_VEC void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  ENGINE_VEC void store(Mask m, float* p, V v) { _mm256_maskstore_ps(p, m, v); }
  ENGINE_VEC V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  ENGINE_VEC V add(V a, V b) { return _mm256_add_ps(a, b); }
  ENGINE_VEC V relu(V v) {  // the lanes <= 0 (not NaN) cleared
    return _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ), v);
  }
};
#include "components/models/packed_gemm_kernels.inc"

// dst[i * ldd + j] = src[j * lds + i] for i < 8, j < 8 (an 8 x 8 tile transposed in registers): rows
// j >= rows of src read as zeros, only columns i < cols read and only those rows of dst written.
ENGINE_KERNEL void transpose_8x8(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  const Vec::Mask cmask = Vec::mask(cols);
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) r[j] = j < rows ? Vec::load(cmask, src + j * lds) : Vec::zero();
  // Pairs of rows interleaved, then pairs of pairs: s[c] holds column c (low half) and c + 4 (high
  // half) of the four rows of its group; then the halves of the two groups joined.
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    t[2 * j] = _mm256_unpacklo_ps(r[2 * j], r[2 * j + 1]);
    t[2 * j + 1] = _mm256_unpackhi_ps(r[2 * j], r[2 * j + 1]);
  }
#pragma GCC unroll 2
  for (int q = 0; q < 2; ++q) {
    r[4 * q] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    r[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xee);
    r[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    r[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xee);
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x20);
    t[4 + c] = _mm256_permute2f128_ps(r[c], r[4 + c], 0x31);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    if (i < cols) _mm256_storeu_ps(dst + i * ldd, t[i]);
}

// The 16 x 16 tile of avx512::transpose_tile, as four 8 x 8 ones.
void transpose_tile(const float* src, int64_t lds, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  for (int64_t j0 = 0; j0 < 16; j0 += 8)
    for (int64_t i0 = 0; i0 < 16 && i0 < cols; i0 += 8)
      transpose_8x8(src + j0 * lds + i0, lds, rows - j0, cols - i0, dst + i0 * ldd + j0, ldd);
}
#undef ENGINE_VEC
#undef ENGINE_KERNEL
}  // namespace avx2

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
  for (PackedB* o : out) *o = PackedB(k, n, strip_in_use());
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
#ifdef ENGINE_PACKED_GEMM_X86
  const PackedGemmIsa isa = packed_gemm_widest();
#endif
  for (int64_t p = first; p < end; ++p) {
    const int64_t n0 = p * kPanel, width = this->width(p), wp = padded_width(p);
    // 16 columns at a time: each inside one strip (strip_ is 16 or 64).
    for (int64_t j0 = 0; j0 < wp; j0 += 16) {
      float* dst = data_.get() + packed_offset(p, j0);
      const int64_t ldd = row_stride(p, j0);
#ifdef ENGINE_PACKED_GEMM_X86
      if (isa != PackedGemmIsa::none) {
        auto* transpose = isa == PackedGemmIsa::avx512 ? avx512::transpose_tile : avx2::transpose_tile;
        for (int64_t k0 = 0; k0 < k; k0 += 16)
          transpose(w + (n0 + j0) * ldw + k0, ldw, std::min<int64_t>(16, width - j0), std::min<int64_t>(16, k - k0),
                    dst + k0 * ldd, ldd);
        continue;
      }
#endif
      for (int64_t kk = 0; kk < k; ++kk)
        for (int64_t j = 0; j < 16; ++j) dst[kk * ldd + j] = j0 + j < width ? w[(n0 + j0 + j) * ldw + kk] : 0.f;
    }
  }
}

// 16 columns for AVX2's 6 x 16 tiles, a whole panel for AVX-512's.
int64_t PackedB::strip_in_use() { return packed_gemm_isa() == PackedGemmIsa::avx2 ? 16 : kPanel; }

PackedB PackedB::in_place(const float* b, int64_t k, int64_t n, int64_t ldb) {
  PackedB out;
  out.k_ = k;
  out.n_ = n;
  out.in_place_ = b;
  out.ldb_ = ldb;
  return out;
}

// Rows per task: a block of A (96 rows) is reused from cache across B's panels, and each panel
// (k x 64 floats) across the block's row groups.
constexpr int64_t kRowBlock = 96;

namespace {
// The kernels in use; TORCH_CHECK where there are none (callers check packed_gemm_available()).
PackedGemmIsa kernels(const char* what) {
  const PackedGemmIsa isa = packed_gemm_isa();
  TORCH_CHECK(isa != PackedGemmIsa::none, what, ": the packed kernels do not run here (packed_gemm_available())");
  return isa;
}
}  // namespace

void gemm_packed_sum_panels_serial(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias,
                                   float* c, int64_t ldc, int64_t p0, int64_t p1, GemmEpilogue epilogue) {
  TORCH_CHECK(count >= 1 && count <= kMaxGemmTerms, "gemm_packed_sum: ", count, " terms (1 to ", kMaxGemmTerms, ")");
  for (int t = 1; t < count; ++t)
    TORCH_CHECK(terms[t].b->n() == terms[0].b->n(), "gemm_packed_sum: the terms' B differ in columns");
  TORCH_CHECK(0 <= p0 && p0 <= p1 && p1 <= terms[0].b->panels(), "gemm_packed_sum: panels [", p0, ", ", p1, ") of ",
              terms[0].b->panels());
  const PackedGemmIsa isa = kernels("gemm_packed_sum");
#ifdef ENGINE_PACKED_GEMM_X86
  auto* rows = isa == PackedGemmIsa::avx512 ? avx512::gemm_rows : avx2::gemm_rows;
  GemmTerm block[kMaxGemmTerms];
  for (int64_t r0 = 0; r0 < m; r0 += kRowBlock) {
    for (int t = 0; t < count; ++t) block[t] = GemmTerm{terms[t].a + r0 * lda, terms[t].b};
    rows(std::min(kRowBlock, m - r0), block, count, lda, bias, c + r0 * ldc, ldc, p0, p1,
         shifted(epilogue, r0 * ldc));
  }
#else
  (void)isa, (void)m, (void)lda, (void)bias, (void)c, (void)ldc, (void)epilogue;
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
  kernels("gemm_packed");
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  at::parallel_for(0, blocks, 1, [&](int64_t first, int64_t end) {
    const int64_t r0 = first * kRowBlock, r1 = std::min(m, end * kRowBlock);
    gemm_packed_serial(r1 - r0, a + r0 * lda, lda, b, bias, c + r0 * ldc, ldc);
  });
}

namespace {
// C's rows [n0, n1) += G^T X on the kernels in use.
void at_b_band(int64_t m, const float* g, int64_t ldg, int64_t n0, int64_t n1, const float* x, int64_t ldx, int64_t k,
               float* c, int64_t ldc) {
  const PackedGemmIsa isa = kernels("gemm_at_b");
#ifdef ENGINE_PACKED_GEMM_X86
  (isa == PackedGemmIsa::avx512 ? avx512::at_b_band : avx2::at_b_band)(m, g, ldg, n0, n1, x, ldx, k, c, ldc);
#else
  (void)isa, (void)m, (void)g, (void)ldg, (void)n0, (void)n1, (void)x, (void)ldx, (void)k, (void)c, (void)ldc;
#endif
}
}  // namespace

void gemm_at_b_sum_serial(const AtBTerm* terms, int64_t count, int64_t ldg, int64_t n0, int64_t n1, int64_t ldx,
                          int64_t k, float* c, int64_t ldc) {
  const PackedGemmIsa isa = kernels("gemm_at_b_sum");
  if (count == 0) {
    for (int64_t r = n0; r < n1; ++r) std::fill(c + r * ldc, c + r * ldc + k, 0.f);
    return;
  }
#ifdef ENGINE_PACKED_GEMM_X86
  (isa == PackedGemmIsa::avx512 ? avx512::at_b_sum : avx2::at_b_sum)(terms, count, ldg, n0, n1, ldx, k, c, ldc);
#else
  (void)isa, (void)terms, (void)ldg, (void)ldx;
#endif
}

void gemm_at_b(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k, float* c,
               int64_t ldc) {
  kernels("gemm_at_b");
  for (int64_t r = 0; r < n; ++r) std::fill(c + r * ldc, c + r * ldc + k, 0.f);
  // Threads take 12-row bands of C; each band sums every block of rows in order.
  const int64_t bands = (n + 11) / 12;
  at::parallel_for(0, bands, 1, [&](int64_t first, int64_t end) {
    at_b_band(m, g, ldg, first * 12, std::min(n, end * 12), x, ldx, k, c, ldc);
  });
}

void gemm_at_b_add_serial(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k,
                          float* c, int64_t ldc) {
  at_b_band(m, g, ldg, 0, n, x, ldx, k, c, ldc);
}

}  // namespace engine
