#pragma once
// Row-major float32 GEMMs against a small right-hand matrix: C = A B (+ bias), where A is a tall
// matrix of activation rows read in place (no copy) and B a layer's weight transposed into column
// panels (the forward), or the weight itself read in place, panel by panel (the input gradient). For the ConvNeXt MLPs (convnext_mlp.cpp), whose products
// are [rows, C] x [C, 4C] and back with C = 40..320: OpenBLAS packs both operands of every call (a
// quarter of its time in copies, measured by perf) and runs these shapes at 70-105 GFLOP/s on one
// thread (33 for fc1's forward at C = 40); an AVX-512 register-blocked kernel that broadcasts A's
// elements from their rows and streams B's packed panel reaches 75-160 on them
// (bench/mlp_gemm.cpp, bench/RESULTS.md). The kernels are written once (packed_gemm_kernels.inc)
// for AVX-512 (16 floats a vector, 32 registers) and AVX2 with FMA (8 floats, 16 registers), with the
// same bits from both; callers use a torch op (OpenBLAS) where packed_gemm_available() is false.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

namespace engine {

/// The instruction sets the kernels are written for, narrowest first.
enum class PackedGemmIsa { none, avx2, avx512 };

/// The widest set this CPU runs (x86-64, GCC or Clang build): AVX-512F, else AVX2 with FMA, else none.
PackedGemmIsa packed_gemm_widest();

/// The set the kernels use: packed_gemm_widest(), or none where the environment variable
/// ENGINE_PACKED_GEMM is "0", or AVX2 where it is "avx2" (on an AVX-512 CPU, to measure one against
/// the other); read once.
PackedGemmIsa packed_gemm_isa();

/// Makes the kernels use `isa` from now on (tests and benchmarks: each set on one machine); returns the
/// set used before. Throws where the CPU lacks it (isa wider than packed_gemm_widest()).
PackedGemmIsa use_packed_gemm_isa(PackedGemmIsa isa);

/// "AVX-512", "AVX2" or "none".
const char* packed_gemm_isa_name(PackedGemmIsa isa);

/// True where gemm_packed runs: packed_gemm_isa() is not none.
bool packed_gemm_available();

/// True when an m-row product is worth packing B for: at 64 rows (the last ConvNeXt stage at batch
/// 64) packing costs about what the kernel saves over OpenBLAS (bench/mlp_gemm.cpp), so products
/// that short stay with OpenBLAS.
bool packed_gemm_pays(int64_t m);

/// A right-hand matrix B [k, n] in the layout gemm_packed reads: column panels of up to 64 columns
/// (padded with zeros to a multiple of 16), each panel cut into strips of strip() columns (64 for the
/// AVX-512 kernels, 16 for AVX2's: as wide as the kernels' register tile), each strip's k rows
/// contiguous and 64-byte aligned. Strips narrower than the panel: AVX2's 16-column strips of a
/// 64-column panel row put their rows 256 bytes apart, and on a 32 KB 8-way L1 only 16 of its 64 sets
/// would hold them (a 256-row strip no longer fits).
class PackedB {
 public:
  /// B = W^T for a row-major W [n, k] with row stride ldw (a Linear's weight, for y = x W^T), in the
  /// strips of the kernels in use (packed_gemm_isa()).
  static PackedB transposed(const float* w, int64_t n, int64_t k, int64_t ldw);
  /// B itself, read where it is (no copy): row-major [k, n] with row stride ldb. The panels are
  /// column ranges of B's rows, whose stride the kernels follow; `b` must outlive the PackedB. For
  /// a layer's backward (gx = gy W), where copying the weight into panels cost what reading it in
  /// place does not (bench/RESULTS.md).
  static PackedB in_place(const float* b, int64_t k, int64_t n, int64_t ldb);
  /// An empty matrix (k = n = 0), to be assigned.
  PackedB() = default;
  /// Several transposed() at once, every panel of every matrix packed in one parallel region: one
  /// wake-up of the intra-op threads instead of one per matrix (a convolution's kernel taps: up to
  /// nine per call). out[i] = transposed(w[i], n, k, ldw); all share the shape.
  static void transposed_each(const std::vector<const float*>& w, int64_t n, int64_t k, int64_t ldw,
                              const std::vector<PackedB*>& out);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t panels() const { return (n_ + kPanel - 1) / kPanel; }
  /// Columns per strip: a strip's rows are contiguous (in place: kPanel, rows B's row stride apart).
  int64_t strip() const { return strip_; }
  /// Row 0 of B's column 64p + j (j < width(p)); the rows of the strip that holds it are
  /// row_stride(p, j) floats apart, its columns from there on contiguous up to the strip's end.
  const float* at(int64_t p, int64_t j) const {
    return in_place_ ? in_place_ + p * kPanel + j : data_.get() + packed_offset(p, j);
  }
  int64_t row_stride(int64_t p, int64_t j) const {
    return in_place_ ? ldb_ : std::min(strip_, padded_width(p) - j / strip_ * strip_);
  }
  /// Panel p's real columns, and those with its zero padding (a multiple of 16).
  int64_t width(int64_t p) const { return n_ - p * kPanel < kPanel ? n_ - p * kPanel : kPanel; }
  int64_t padded_width(int64_t p) const { return (width(p) + 15) / 16 * 16; }

  static constexpr int64_t kPanel = 64;

 private:
  struct Free {
    void operator()(float* p) const;
  };
  PackedB(int64_t k, int64_t n, int64_t strip);
  void pack_panels(const float* w, int64_t ldw, int64_t first, int64_t end);  // transposed()'s panels [first, end)
  static int64_t strip_in_use();  // the strip of the kernels in use
  // at(p, j)'s place in data_ (packed).
  int64_t packed_offset(int64_t p, int64_t j) const { return p * kPanel * k_ + j / strip_ * strip_ * k_ + j % strip_; }
  int64_t k_ = 0, n_ = 0, strip_ = kPanel;
  std::unique_ptr<float[], Free> data_;
  const float* in_place_ = nullptr;  // in_place(): B's memory
  int64_t ldb_ = 0;
};

/// C[m, n] = A[m, k] B + bias for row-major A (row stride lda) and C (row stride ldc); bias [n] is
/// added to every row (nullptr: none). C is written, never read. Rows are split over LibTorch's
/// intra-op threads. Requires packed_gemm_available().
void gemm_packed(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c,
                 int64_t ldc);

/// gemm_packed on the calling thread only (for callers that split rows themselves).
void gemm_packed_serial(int64_t m, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c,
                        int64_t ldc);

/// One product of a sum: A [m, b->k()] from `a` (rows the sum's lda apart) times *b.
struct GemmTerm {
  const float* a;
  const PackedB* b;
};
constexpr int kMaxGemmTerms = 64;

/// C[m, n] = sum over the terms of A_t B_t (+ bias), on the calling thread: the terms' B all [*, n],
/// their A rows lda apart. Each tile of C sums in registers, term after term, k in order, and is
/// written once (C is not read): a convolution's output position as the sum over its kernel taps,
/// each tap's input pixels a run of memory (im2col_conv.cpp). 1 to kMaxGemmTerms terms.
void gemm_packed_sum_serial(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias, float* c,
                            int64_t ldc);

/// What the store of a packed sum does to each element after its bias and products: adds the element of
/// `residual` at the same place (a matrix laid out as C, row stride ldc; nullptr: none), then takes max(., 0)
/// when `relu`. The bits of storing C and then doing both as separate passes (evaluation's convolution
/// with its BatchNorm folded in, its residual sum and ReLU, in one pass: resnet.cpp).
struct GemmEpilogue {
  const float* residual = nullptr;
  bool relu = false;
};

/// gemm_packed_sum_serial for C's columns in B's panels [p0, p1) only (PackedB::kPanel columns each;
/// c and bias as for all of them). Every element of C gets the same bits as from the whole call: callers
/// split a product over threads by panels as well as by rows.
void gemm_packed_sum_panels_serial(int64_t m, const GemmTerm* terms, int count, int64_t lda, const float* bias,
                                   float* c, int64_t ldc, int64_t p0, int64_t p1, GemmEpilogue epilogue = {});

/// One product of a weight-gradient sum: `rows` rows of G from `g` and of X from `x` (the sum's ldg / ldx apart).
struct AtBTerm {
  const float* g;
  const float* x;
  int64_t rows;
};

/// C[r, :] = the sum over the terms of (G_t^T X_t)[r, :] for C's rows r in [n0, n1), on the calling thread:
/// G_t [rows_t, *] (row stride ldg, C's row r is G's column r), X_t [rows_t, k] (ldx), C row-major with
/// row stride ldc, those rows overwritten (zeros when count is 0). A convolution tap's weight gradient
/// summed over the output positions that read through it (im2col_conv.cpp). Each tile of C sums in
/// registers over the terms of up to 512 rows at a time, then adds in the next ones': every element sums
/// the terms in order and each term's rows in order, the same bits whatever rows [n0, n1) a call takes.
void gemm_at_b_sum_serial(const AtBTerm* terms, int64_t count, int64_t ldg, int64_t n0, int64_t n1, int64_t ldx,
                          int64_t k, float* c, int64_t ldc);

/// The rows of G and X that gemm_at_b sums as one block (both stay in L2 while every tile of C passes
/// over them); blocks are added in turn. Callers that cut the rows into terms themselves cut them so.
constexpr int64_t kAtBBlockRows = 256;

/// C[n, k] = G^T X = the sum over rows r of G[r, :] (outer) X[r, :], for row-major G [m, n] (row
/// stride ldg) and X [m, k] (ldx); C [n, k] row-major with row stride ldc, overwritten. A Linear's
/// weight gradient from its output gradient G and input rows X. Neither operand is copied: per
/// block of rows, tiles of C accumulate in registers from G's broadcast elements and X's rows. Each
/// element sums the rows in order, 256-row blocks added in turn, whatever the thread count (threads
/// split C's rows). Requires packed_gemm_available().
void gemm_at_b(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k, float* c,
               int64_t ldc);

/// C += G^T X on the calling thread, the rows in the same 256-row blocks as gemm_at_b: called with
/// C zeroed and then once per consecutive 256-row slice of G and X (in order), C ends with
/// gemm_at_b's bits. For callers that walk the rows in chunks themselves (convnext_mlp.cpp's
/// backward, each chunk's operands still in cache).
void gemm_at_b_add_serial(int64_t m, const float* g, int64_t ldg, int64_t n, const float* x, int64_t ldx, int64_t k,
                          float* c, int64_t ldc);

}  // namespace engine
