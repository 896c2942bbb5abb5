#include "components/models/im2col_conv.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

// simd.h's vector helpers (unused here) draw GCC's ABI note for AVX vectors: it does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#include "components/models/frozen_weights.h"
#include "components/models/gradient_memory.h"
#include "components/models/packed_gemm.h"
#include "components/models/row_gemm.h"
#include "components/models/simd.h"
#include "engine/core/blas.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/env.h"

// Why (1 thread, batch 64, channels-last, Debian LibTorch 1.13 with oneDNN 2.6, OpenBLAS; 2-core
// AMD EPYC 7001, 32 GFLOP/s sgemm):
// - stride == kernel convolutions (ConvNeXt's stem and downsamples): oneDNN reaches 20-45 GFLOP/s
//   on the small maps and is slow backward (in_chans 1 stem: 0.6 ms for an 8 MFLOP weight
//   gradient); as GEMMs on the patch rows, convnext_atto's four at 40x40, fwd+bwd: 8.1-9.0 ->
//   3.9-4.5 ms (a Zen 4 core).
// - a ResNet's last stages on small images (resnet34 on 28x28 digits: layer3 at 2x2, layer4 at
//   1x1): oneDNN's weight gradient of a 3x3 conv 512 -> 512 on a 1x1 map took 173 ms, 11x its
//   forward (as im2col + GEMM: 15.6 ms with all nine taps, and one tap of nine is live), 256 -> 256
//   at 2x2 20.8 ms (GEMM 10.9); at 4x4 the two were even, at 7x7 oneDNN won (8.8 vs 28 ms). Its
//   whole backward was 5.5x its forward, where 2x is the arithmetic: resnet34 trained at 29 img/s
//   and evaluated at 195, the same as PyTorch eager (which calls the same oneDNN). As one GEMM per
//   output position and live kernel row (position_conv2d: no zeros multiplied, no rows gathered),
//   fwd / fwd+bwd ms: 2x2 256 -> 256 8.8 / 35.8 (oneDNN) vs 4.6 / 10.2; 4x4 128 -> 128 8.6 / 27.5
//   vs 6.1 / 16.7; 1x1 512 -> 512 13.8 / 189 vs 1.1 / 4.0; the im2col rows of a 2x2 map carry 5
//   zero taps of 9 per position. resnet34 trained at 58-73 img/s with im2col at <= 4 positions,
//   99-100 with position_conv2d there, 109-112 with it up to 16 (evaluation 412-425, oneDNN 223).
// The maths is unchanged, only the summation order differs (float rounding).

namespace engine {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A convolution's sizes, and the kernel taps that see at least one input pixel: rows ky0..ky0+ty-1
// and columns kx0..kx0+tx-1 of the kernel (a contiguous range each: a tap is live when some output
// position reads an in-range pixel through it, and which ones do is monotone in the tap).
struct Geometry {
  int64_t n, c, h, w, o, kh, kw, sh, sw, ph, pw, ho, wo;
  int64_t ky0, ty, kx0, tx;
  int64_t rows() const { return n * ho * wo; }
  int64_t cols() const { return ty * tx * c; }
  bool all_taps() const { return ty == kh && tx == kw; }
  // 1x1, stride 1, no padding: one GEMM over every pixel (the NHWC input is its [N*H*W, Cin] matrix).
  bool pointwise() const { return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  std::vector<int64_t> pack() const { return {n, c, h, w, o, kh, kw, sh, sw, ph, pw}; }
};

Geometry geometry(std::vector<int64_t> s) {  // s: pack()'s order
  Geometry g{s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], 0, 0, 0, 0, 0, 0};
  g.ho = (g.h + 2 * g.ph - g.kh) / g.sh + 1;
  g.wo = (g.w + 2 * g.pw - g.kw) / g.sw + 1;
  auto live = [](int64_t in, int64_t out, int64_t k, int64_t s, int64_t p, int64_t& first, int64_t& count) {
    first = std::max<int64_t>(0, p - (out - 1) * s);  // the last output reaches the first pixel
    const int64_t last = std::min<int64_t>(k - 1, in - 1 + p);  // the first output reaches the last pixel
    count = last - first + 1;
  };
  live(g.h, g.ho, g.kh, g.sh, g.ph, g.ky0, g.ty);
  live(g.w, g.wo, g.kw, g.sw, g.pw, g.kx0, g.tx);
  return g;
}

Geometry geometry(const torch::Tensor& x, const torch::Tensor& w, at::IntArrayRef stride, at::IntArrayRef padding) {
  auto pick = [](at::IntArrayRef a, size_t i) { return a.size() == 1 ? a[0] : a[i]; };
  return geometry({x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3), pick(stride, 0),
                   pick(stride, 1), pick(padding, 0), pick(padding, 1)});
}

// Row (n, oy, ox) of the im2col matrix P [N*Ho*Wo, ty*tx*C] holds, per live kernel row, the tx*C
// floats under the live kernel columns: one run of NHWC memory, zeros where it leaves the map.
// to_rows: x -> P; else P is added into x (windows overlap when stride < kernel). Parallel over
// images: the windows of two images never share a pixel.
void move_rows(const Geometry& g, float* x, float* p, bool to_rows) {
  const int64_t cols = g.cols(), run = g.tx * g.c;
  at::parallel_for(0, g.n, 1, [&](int64_t b, int64_t e) {
    for (int64_t n = b; n < e; ++n)
      for (int64_t oy = 0; oy < g.ho; ++oy)
        for (int64_t ox = 0; ox < g.wo; ++ox) {
          float* row = p + ((n * g.ho + oy) * g.wo + ox) * cols;
          const int64_t ix0 = ox * g.sw - g.pw + g.kx0;  // input column under the first live tap
          const int64_t a = std::max<int64_t>(0, -ix0), z = std::min<int64_t>(g.tx, g.w - ix0);  // in range: [a, z)
          for (int64_t t = 0; t < g.ty; ++t) {
            float* r = row + t * run;
            const int64_t iy = oy * g.sh - g.ph + g.ky0 + t;
            const bool inside = iy >= 0 && iy < g.h && a < z;
            if (!to_rows) {
              if (!inside) continue;
              float* xr = x + ((n * g.h + iy) * g.w + ix0 + a) * g.c;
              const float* pr = r + a * g.c;
              for (int64_t i = 0; i < (z - a) * g.c; ++i) xr[i] += pr[i];
              continue;
            }
            if (!inside) {
              std::memset(r, 0, run * sizeof(float));
              continue;
            }
            std::memset(r, 0, a * g.c * sizeof(float));
            std::memcpy(r + a * g.c, x + ((n * g.h + iy) * g.w + ix0 + a) * g.c, (z - a) * g.c * sizeof(float));
            std::memset(r + z * g.c, 0, (g.tx - z) * g.c * sizeof(float));
          }
        }
  });
}

torch::Tensor im2col_rows(const Geometry& g, const torch::Tensor& x) {
  torch::Tensor xh = x.permute({0, 2, 3, 1}).contiguous();  // free for channels-last x
  torch::Tensor p = torch::empty({g.rows(), g.cols()}, x.options());
  move_rows(g, xh.data_ptr<float>(), p.data_ptr<float>(), true);
  return p;
}

// The live taps of the weight as [Cout, ty*tx*Cin] (a view when all taps live and the weight is
// channels-last, as in a channels-last model).
torch::Tensor weight_matrix(const Geometry& g, const torch::Tensor& w) {
  torch::Tensor wh = w.permute({0, 2, 3, 1});
  if (!g.all_taps()) wh = wh.narrow(1, g.ky0, g.ty).narrow(2, g.kx0, g.tx);
  return wh.contiguous().view({g.o, -1});
}

torch::Tensor output(const Geometry& g, const torch::Tensor& rows) {  // -> channels-last NCHW
  return rows.view({g.n, g.ho, g.wo, g.o}).permute({0, 3, 1, 2});
}

// The three products on the patch rows (row_gemm.h: the packed kernels where they run and pay).
torch::Tensor forward_rows(const Geometry& g, const torch::Tensor& p, const torch::Tensor& w, const torch::Tensor& b) {
  return linear_rows(p, weight_matrix(g, w), b);
}

struct Im2colConv : public torch::autograd::Function<Im2colConv> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b,
                               std::vector<int64_t> sizes) {
    const Geometry g = geometry(sizes);
    torch::Tensor p = im2col_rows(g, x);
    ctx->save_for_backward({w});
    ctx->saved_data["p"] = p;  // the rows serve the weight gradient: no second gather
    ctx->saved_data["sizes"] = sizes;
    return output(g, forward_rows(g, p, w, b));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor w = ctx->get_saved_variables()[0];
    torch::Tensor p = ctx->saved_data["p"].toTensor();
    const Geometry g = geometry(ctx->saved_data["sizes"].toIntVector());
    // [N*Ho*Wo, Cout]: a view of a channels-last gradient.
    torch::Tensor gy = grads[0].permute({0, 2, 3, 1}).contiguous().view({g.rows(), g.o});
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor gp = rows_times(gy, weight_matrix(g, w));
      torch::Tensor gxh = torch::zeros({g.n, g.h, g.w, g.c}, gy.options());  // pixels no window reads: 0
      move_rows(g, gxh.data_ptr<float>(), gp.data_ptr<float>(), false);
      gx = gxh.permute({0, 3, 1, 2});
    }
    if (ctx->needs_input_grad(1)) {
      torch::Tensor gwm = weight_grad(gy, p, {g.o, g.cols()});  // [Cout, ty*tx*Cin]
      if (g.all_taps()) {
        gw = gwm.view({g.o, g.kh, g.kw, g.c}).permute({0, 3, 1, 2});
      } else {  // taps that only ever see padding get zero gradient
        torch::Tensor full = torch::zeros({g.o, g.kh, g.kw, g.c}, gwm.options());
        full.narrow(1, g.ky0, g.ty).narrow(2, g.kx0, g.tx).copy_(gwm.view({g.o, g.ty, g.tx, g.c}));
        gw = full.permute({0, 3, 1, 2});
      }
    }
    if (ctx->needs_input_grad(2)) gb = gy.sum(0);
    return {gx, gw, gb, torch::Tensor()};
  }
};

// One GEMM per output position and live kernel row, straight on NHWC memory: for output (oy, ox)
// and kernel row ky, the input pixels under the live columns kx0..kx0+tx-1 are one run of tx*Cin
// floats in every image (a matrix [N, tx*Cin] with leading dimension H*W*Cin), and the weight's
// taps (ky, kx0..) one run in every output channel of a [Cout, kh, kw, Cin] weight. Only taps that
// see a pixel of that position are multiplied: on a 2x2 map a 3x3 kernel has 4 of them per position
// (im2col rows: 9, the rest zeros), on a 4x4 map 4 to 9. No rows are gathered. A pointwise
// convolution (1x1, stride 1, no padding) is one GEMM over every pixel instead (the NHWC input is
// its [N*H*W, Cin] matrix; per position: 8-18% slower, ResNet-50's bottlenecks).
struct PositionGemm {
  int64_t rows;        // images, or every pixel (pointwise)
  int64_t x, ldx;      // the input run: offset into NHWC x, row stride
  int64_t y, ldy;      // the output row: offset into NHWC y, row stride
  int64_t w, k;        // the weight run: offset into [Cout, kh, kw, Cin], length (row stride kh*kw*Cin)
};

// Calls f(PositionGemm) for every GEMM of the convolution, in a fixed order (the summation order of
// every pass).
template <class F>
void for_each_position_gemm(const Geometry& g, F f) {
  const int64_t ldx = g.h * g.w * g.c, ldy = g.ho * g.wo * g.o;
  if (g.pointwise()) {
    f(PositionGemm{g.n * g.h * g.w, 0, g.c, 0, g.o, 0, g.c});
    return;
  }
  auto live = [](int64_t o, int64_t k, int64_t s, int64_t p, int64_t in, int64_t& first, int64_t& count) {
    first = std::max<int64_t>(0, p - o * s);
    count = std::min<int64_t>(k, in + p - o * s) - first;
  };
  for (int64_t oy = 0; oy < g.ho; ++oy) {
    int64_t ky0, ty;
    live(oy, g.kh, g.sh, g.ph, g.h, ky0, ty);
    for (int64_t ox = 0; ox < g.wo; ++ox) {
      int64_t kx0, tx;
      live(ox, g.kw, g.sw, g.pw, g.w, kx0, tx);
      if (tx <= 0) continue;
      const int64_t ix = ox * g.sw - g.pw + kx0;
      for (int64_t ky = ky0; ky < ky0 + ty; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
        f(PositionGemm{g.n, (iy * g.w + ix) * g.c, ldx, (oy * g.wo + ox) * g.o, ldy, (ky * g.kw + kx0) * g.c, tx * g.c});
      }
    }
  }
}

// y [N, Ho, Wo, Cout] (NHWC) = bias + sum over positions and live rows of x_run . w_run^T.
torch::Tensor position_forward(const Geometry& g, const torch::Tensor& xh, const torch::Tensor& wh,
                               const torch::Tensor& b) {
  torch::Tensor y = b.defined() ? b.expand({g.n, g.ho, g.wo, g.o}).contiguous()
                                : torch::zeros({g.n, g.ho, g.wo, g.o}, xh.options());
  const float *x = xh.data_ptr<float>(), *w = wh.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const int64_t ldw = g.kh * g.kw * g.c;
  for_each_position_gemm(g, [&](const PositionGemm& r) {
    sgemm_rows(false, true, r.rows, g.o, r.k, 1.f, x + r.x, r.ldx, w + r.w, ldw, 1.f, out + r.y, r.ldy);
  });
  return y;
}

}  // namespace

// The packed kernels' form of the weight: tap t = ky * kw + kx as B = W[:, :, ky, kx]^T [Cin, Cout],
// packed when a call first needs it (a 3x3 kernel on a 1x1 map needs only its centre), kept for the
// weight it was made from while the FrozenWeights scope it was made in lasts.
struct ConvWeightCache::Taps {
  uint64_t scope = 0;
  const void* weight = nullptr;  // the weight's TensorImpl and data, sizes, when packed
  const void* data = nullptr;
  std::vector<int64_t> sizes;
  std::vector<PackedB> packed;  // kh * kw; k() == 0: not packed yet
};

ConvWeightCache::ConvWeightCache() = default;
ConvWeightCache::~ConvWeightCache() = default;
ConvWeightCache::Taps& ConvWeightCache::taps() {
  if (!taps_) taps_ = std::make_unique<Taps>();
  return *taps_;
}
void ConvWeightCache::release() { taps_.reset(); }

namespace {
// Outside a FrozenWeights scope a cache keeps nothing (training: the weights move at every step).
void release_outside_scope(ConvWeightCache* cache) {
  if (cache && frozen_weights_scope() == 0) cache->release();
}

// The taps to pack into for this call: the cache's, emptied unless made for this weight in this
// FrozenWeights scope; `local` when there is no cache or no scope.
std::vector<PackedB>& taps_for(const Geometry& g, const torch::Tensor& weight, ConvWeightCache* cache,
                               std::vector<PackedB>& local) {
  const uint64_t scope = frozen_weights_scope();
  if (!cache || scope == 0) {
    local.clear();
    local.resize(g.kh * g.kw);
    return local;
  }
  ConvWeightCache::Taps& t = cache->taps();
  if (t.scope != scope || t.weight != weight.unsafeGetTensorImpl() || t.data != weight.data_ptr() ||
      t.sizes != weight.sizes().vec()) {
    t = ConvWeightCache::Taps{scope, weight.unsafeGetTensorImpl(), weight.data_ptr(), weight.sizes().vec(), {}};
    t.packed.resize(g.kh * g.kw);
  }
  return t.packed;
}

// One output row group of a packed convolution pass: `rows` rows (ldc apart) from `out`, each the sum
// of `count` products A_t B_t (A_t's rows lda apart from terms[t].a), plus the bias.
struct TermSum {
  int64_t out;  // offset of row 0 in the output
  int count;
  GemmTerm terms[kMaxGemmTerms];
};

// Runs task(i) for i in [0, count) on LibTorch's intra-op threads, each thread taking the next task
// when it is done with one (tasks of unequal cost: taps read by 1 to 16 positions, positions that
// sum 4 to 9 taps). One parallel region: every region wakes the sleeping threads (tens of us here).
template <class F>
void for_each_task(int64_t count, F task) {
  std::atomic<int64_t> next{0};
  at::parallel_for(0, std::min<int64_t>(count, at::get_num_threads()), 1, [&](int64_t, int64_t) {
    for (int64_t i = next++; i < count; i = next++) task(i);
  });
}

// Sums of `rows` rows each on the packed kernels, cut into units for the intra-op threads: (sum, panel
// of 64 output columns, row chunk), chunks only when the sums' panels are fewer than twice the
// threads. Each element is one unit's, summing its terms in the same order whatever the cut (the same
// bits at any thread count). A sum of no term is the bias (zeros without one).
class TermSums {
 public:
  // epilogue.residual, where set, is laid out as `out` (the same offsets).
  TermSums(std::vector<TermSum> sums, int64_t rows, int64_t lda, const float* bias, int64_t cols, float* out,
           int64_t ldc, GemmEpilogue epilogue = {})
      : sums_(std::move(sums)), rows_(rows), lda_(lda), bias_(bias), cols_(cols), out_(out), ldc_(ldc),
        panels_((cols + PackedB::kPanel - 1) / PackedB::kPanel), epilogue_(epilogue) {
    const int64_t threads = at::get_num_threads(), base = static_cast<int64_t>(sums_.size()) * panels_;
    const int64_t chunks = base >= 2 * threads ? 1 : (2 * threads + base - 1) / std::max<int64_t>(1, base);
    chunk_rows_ = (rows + chunks - 1) / chunks;
    chunk_rows_ = (chunk_rows_ + 23) / 24 * 24;  // whole register tiles (6, 8 or 12 rows)
    chunks_ = std::max<int64_t>(1, (rows + chunk_rows_ - 1) / chunk_rows_);
  }
  int64_t units() const { return static_cast<int64_t>(sums_.size()) * panels_ * chunks_; }
  void run(int64_t u) const {
    const TermSum& s = sums_[u / (panels_ * chunks_)];
    const int64_t panel = u / chunks_ % panels_, r0 = u % chunks_ * chunk_rows_, r1 = std::min(rows_, r0 + chunk_rows_);
    if (r0 >= r1) return;
    const int64_t at = s.out + r0 * ldc_;
    GemmEpilogue e = epilogue_;
    if (e.residual) e.residual += at;
    if (s.count == 0) {
      const int64_t c0 = panel * PackedB::kPanel, c1 = std::min(cols_, c0 + PackedB::kPanel);
      for (int64_t r = 0; r < r1 - r0; ++r) {
        float* row = out_ + at + r * ldc_;
        for (int64_t j = c0; j < c1; ++j) {
          float v = bias_ ? bias_[j] : 0.f;
          if (e.residual) v += e.residual[r * ldc_ + j];
          row[j] = e.relu && !(v > 0.f) && v == v ? 0.f : v;  // torch's relu: NaN kept, -0 to +0
        }
      }
      return;
    }
    GemmTerm terms[kMaxGemmTerms];
    for (int t = 0; t < s.count; ++t) terms[t] = GemmTerm{s.terms[t].a + r0 * lda_, s.terms[t].b};
    gemm_packed_sum_panels_serial(r1 - r0, terms, s.count, lda_, bias_, out_ + at, ldc_, panel, panel + 1, e);
  }
  void run_all() const {
    for_each_task(units(), [&](int64_t u) { run(u); });
  }

 private:
  std::vector<TermSum> sums_;
  int64_t rows_, lda_;
  const float* bias_;
  int64_t cols_;
  float* out_;
  int64_t ldc_, panels_, chunk_rows_ = 0, chunks_ = 1;
  GemmEpilogue epilogue_;
};

// y [N, Ho, Wo, Cout] (NHWC) = bias + the sum over each position's live taps of x_pixel . W_tap, one
// gemm_packed_sum per output position (rows: the images, lda = H*W*Cin apart), the sum in registers;
// a pointwise convolution is one sum of one term over every pixel. The taps no call has packed yet
// are packed first, all in one parallel region; then the sums in another. `residual` (NHWC as y, or
// undefined) is added and `relu` applied as each element is stored (GemmEpilogue).
torch::Tensor packed_position_forward(const Geometry& g, const torch::Tensor& xh, const torch::Tensor& wh,
                                      const torch::Tensor& b, std::vector<PackedB>& taps,
                                      const torch::Tensor& residual = {}, bool relu = false) {
  torch::Tensor y = torch::empty({g.n, g.ho, g.wo, g.o}, xh.options());
  const float *x = xh.data_ptr<float>(), *w = wh.data_ptr<float>(), *bias = b.defined() ? b.data_ptr<float>() : nullptr;
  float* out = y.data_ptr<float>();
  const bool pointwise = g.pointwise();
  const int64_t rows = pointwise ? g.n * g.h * g.w : g.n;  // per position
  const int64_t lda = pointwise ? g.c : g.h * g.w * g.c, ldy = pointwise ? g.o : g.ho * g.wo * g.o;
  // The taps the sums read that no earlier call packed (a 3x3 kernel on a 1x1 map reads only its
  // centre), collected as the sums are laid out, then packed together.
  std::vector<const float*> from;
  std::vector<PackedB*> to;
  std::vector<char> queued(taps.size(), 0);
  auto tap = [&](int64_t t) -> const PackedB* {
    if (taps[t].k() == 0 && !queued[t]) {
      queued[t] = 1;
      from.push_back(w + t * g.c);
      to.push_back(&taps[t]);
    }
    return &taps[t];
  };
  std::vector<TermSum> positions;  // out: image 0's output pixel in y; terms' a: image 0's pixel under the tap
  if (pointwise) {
    positions.push_back(TermSum{0, 1, {GemmTerm{x, tap(0)}}});
  } else {
    positions.reserve(g.ho * g.wo);
    for (int64_t oy = 0; oy < g.ho; ++oy)
      for (int64_t ox = 0; ox < g.wo; ++ox) {
        TermSum p{(oy * g.wo + ox) * g.o, 0, {}};
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.ph + ky;
          if (iy < 0 || iy >= g.h) continue;
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t ix = ox * g.sw - g.pw + kx;
            if (ix >= 0 && ix < g.w) p.terms[p.count++] = GemmTerm{x + (iy * g.w + ix) * g.c, tap(ky * g.kw + kx)};
          }
        }
        positions.push_back(p);
      }
  }
  PackedB::transposed_each(from, g.o, g.c, g.kh * g.kw * g.c, to);
  const GemmEpilogue epilogue{residual.defined() ? residual.data_ptr<float>() : nullptr, relu};
  TermSums(std::move(positions), rows, lda, bias, g.o, out, ldy, epilogue).run_all();  // padding only: the bias alone
  return y;
}

// The packed sums where they run (ENGINE_PACKED_CONV not "0", at most kMaxGemmTerms taps) and pay.
// Training (forward and backward on the packed kernels) only on AVX-512: on AVX2 the backward's sums read
// rows of dy, x and the weight that lie a page or more apart through 16-column strips, and a step's
// resnet34 convolutions took 346-350 ms against 250 ms on the OpenBLAS GEMMs per position (Zen 3,
// build/bench_conv_layers 5 64 28 "" pos at 1 thread, ENGINE_PACKED_GEMM unset vs "0").
bool packed_conv(const Geometry& g, bool training) {
  return packed_gemm_available() && (!training || packed_gemm_isa() == PackedGemmIsa::avx512) &&
         g.kh * g.kw <= kMaxGemmTerms && !switched_off("ENGINE_PACKED_CONV");
}

// The input gradient dx [N, H, W, Cin] (NHWC, every element written) as sums: per input pixel, the sum
// over the (output position, tap) pairs that read it of dy_position [N, Cout] times the tap's weight
// [Cout, Cin], read in place from the [Cout, kh, kw, Cin] weight (`taps`: filled here, read by the
// sums); a pixel no window reads gets 0. A pointwise convolution is one product over every pixel.
TermSums input_grad_sums(const Geometry& g, const float* dy, const float* w, float* dx, std::vector<PackedB>& taps) {
  const int64_t ldw = g.kh * g.kw * g.c;
  taps.clear();
  taps.reserve(g.kh * g.kw);
  for (int64_t t = 0; t < g.kh * g.kw; ++t) taps.push_back(PackedB::in_place(w + t * g.c, g.o, g.c, ldw));
  const bool flat = g.pointwise();
  const int64_t rows = flat ? g.n * g.h * g.w : g.n;  // per pixel
  const int64_t lda = flat ? g.o : g.ho * g.wo * g.o, ldc = flat ? g.c : g.h * g.w * g.c;
  std::vector<TermSum> pixels;  // out: image 0's pixel in dx; terms' a: image 0's output position in dy
  if (flat) {
    pixels.push_back(TermSum{0, 1, {GemmTerm{dy, &taps[0]}}});
  } else {
    pixels.reserve(g.h * g.w);
    for (int64_t iy = 0; iy < g.h; ++iy)
      for (int64_t ix = 0; ix < g.w; ++ix) {
        TermSum p{(iy * g.w + ix) * g.c, 0, {}};
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t ky = iy - oy * g.sh + g.ph;
          if (ky < 0 || ky >= g.kh) continue;
          for (int64_t ox = 0; ox < g.wo; ++ox) {
            const int64_t kx = ix - ox * g.sw + g.pw;
            if (kx >= 0 && kx < g.kw) p.terms[p.count++] = GemmTerm{dy + (oy * g.wo + ox) * g.o, &taps[ky * g.kw + kx]};
          }
        }
        pixels.push_back(p);
      }
  }
  return TermSums(std::move(pixels), rows, lda, nullptr, g.c, dx, ldc);
}

// The weight gradient dw [Cout, kh, kw, Cin] (OHWI, every element written) as units: per tap, the sum
// over the output positions that read a pixel through it of dy_position^T [Cout, N] times x_pixel
// [N, Cin]; a tap that only sees padding gets 0. A pointwise convolution's one tap sums every pixel
// (in terms of kAtBBlockRows). A unit is a (tap, band of 48 output channels).
class TapGradients {
 public:
  TapGradients(const Geometry& g, const float* dy, const float* x, float* dw)
      : terms_(g.kh * g.kw), o_(g.o), c_(g.c), ldw_(g.kh * g.kw * g.c), dw_(dw) {
    const bool flat = g.pointwise();
    ldg_ = flat ? g.o : g.ho * g.wo * g.o;
    ldx_ = flat ? g.c : g.h * g.w * g.c;
    if (flat) {
      for (int64_t r0 = 0; r0 < g.n * g.h * g.w; r0 += kAtBBlockRows)
        terms_[0].push_back(AtBTerm{dy + r0 * g.o, x + r0 * g.c, std::min(kAtBBlockRows, g.n * g.h * g.w - r0)});
    } else {
      for (int64_t ky = 0; ky < g.kh; ++ky)
        for (int64_t kx = 0; kx < g.kw; ++kx)
          for (int64_t oy = 0; oy < g.ho; ++oy) {
            const int64_t iy = oy * g.sh - g.ph + ky;
            if (iy < 0 || iy >= g.h) continue;
            for (int64_t ox = 0; ox < g.wo; ++ox) {
              const int64_t ix = ox * g.sw - g.pw + kx;
              if (ix >= 0 && ix < g.w)
                terms_[ky * g.kw + kx].push_back(AtBTerm{dy + (oy * g.wo + ox) * g.o, x + (iy * g.w + ix) * g.c, g.n});
            }
          }
    }
  }
  int64_t units() const { return static_cast<int64_t>(terms_.size()) * bands(); }
  void run(int64_t i) const {
    const std::vector<AtBTerm>& tap = terms_[i / bands()];
    const int64_t n0 = (i % bands()) * kBand, n1 = std::min(o_, n0 + kBand);
    gemm_at_b_sum_serial(tap.data(), static_cast<int64_t>(tap.size()), ldg_, n0, n1, ldx_, c_,
                         dw_ + (i / bands()) * c_, ldw_);
  }

 private:
  static constexpr int64_t kBand = 48;  // a multiple of every tile's rows (6, 8, 12)
  int64_t bands() const { return (o_ + kBand - 1) / kBand; }
  std::vector<std::vector<AtBTerm>> terms_;
  int64_t o_, c_, ldw_, ldg_ = 0, ldx_ = 0;
  float* dw_;
};

torch::Tensor nhwc(const torch::Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }  // free if channels-last

struct PositionConv : public torch::autograd::Function<PositionConv> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor w, torch::Tensor b,
                               std::vector<int64_t> sizes) {
    const Geometry g = geometry(sizes);
    torch::Tensor xh = nhwc(x), wh = nhwc(w);
    ctx->save_for_backward({xh, wh, w});  // w: the parameter, whose gradient memory the backward claims
    ctx->saved_data["sizes"] = sizes;
    if (!packed_conv(g, true)) return position_forward(g, xh, wh, b).permute({0, 3, 1, 2});
    std::vector<PackedB> taps(g.kh * g.kw);
    return packed_position_forward(g, xh, wh, b, taps).permute({0, 3, 1, 2});
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xh = saved[0], &wh = saved[1];
    const Geometry g = geometry(ctx->saved_data["sizes"].toIntVector());
    torch::Tensor gy = nhwc(grads[0]);
    const float *dy = gy.data_ptr<float>(), *x = xh.data_ptr<float>(), *w = wh.data_ptr<float>();
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(2)) gb = gy.view({-1, g.o}).sum(0);
    if (packed_conv(g, true)) {
      // Both gradients' units in one parallel region (the weight's, the larger, first).
      std::vector<PackedB> taps;
      std::optional<TermSums> input;
      std::optional<TapGradients> weight;
      if (ctx->needs_input_grad(0)) {
        torch::Tensor dx = torch::empty({g.n, g.h, g.w, g.c}, gy.options());
        input.emplace(input_grad_sums(g, dy, w, dx.data_ptr<float>(), taps));
        gx = dx.permute({0, 3, 1, 2});
      }
      if (ctx->needs_input_grad(1)) {
        // Straight into the optimizer's gradient buffer when it is open to this parameter with the
        // weight's channels-last layout (gradient_memory.h): no zeroed tensor, no copy after.
        gw = claim_gradient_memory(saved[2]);
        if (!gw.defined() || !gw.permute({0, 2, 3, 1}).is_contiguous())
          gw = torch::empty({g.o, g.kh, g.kw, g.c}, gy.options()).permute({0, 3, 1, 2});
        weight.emplace(g, dy, x, gw.data_ptr<float>());
      }
      const int64_t weight_units = weight ? weight->units() : 0, input_units = input ? input->units() : 0;
      for_each_task(weight_units + input_units, [&](int64_t i) {
        if (i < weight_units)
          weight->run(i);
        else
          input->run(i - weight_units);
      });
      return {gx, gw, gb, torch::Tensor()};
    }
    const int64_t ldw = g.kh * g.kw * g.c;
    // A zero NHWC / OHWI gradient, every GEMM's products added in (pixels no window reads and taps
    // that only see padding stay 0), returned as an NCHW view.
    auto accumulate = [&](std::vector<int64_t> shape, auto add_products) {
      torch::Tensor out = torch::zeros(shape, gy.options());
      float* o = out.data_ptr<float>();
      for_each_position_gemm(g, [&](const PositionGemm& r) { add_products(o, r); });
      return out.permute({0, 3, 1, 2});
    };
    if (ctx->needs_input_grad(0))
      gx = accumulate({g.n, g.h, g.w, g.c}, [&](float* dx, const PositionGemm& r) {
        sgemm_rows(false, false, r.rows, r.k, g.o, 1.f, dy + r.y, r.ldy, w + r.w, ldw, 1.f, dx + r.x, r.ldx);
      });
    if (ctx->needs_input_grad(1))
      gw = accumulate({g.o, g.kh, g.kw, g.c}, [&](float* dw, const PositionGemm& r) {
        sgemm_rows(true, false, g.o, r.k, r.rows, 1.f, dy + r.y, r.ldy, x + r.x, r.ldx, 1.f, dw + r.w, ldw);
      });
    return {gx, gw, gb, torch::Tensor()};
  }
};

// The geometry when the GEMM path can take this convolution: CPU float32 operands outside autocast
// (the bias too, when there is one), 4-d operands with matching channels, strides >= 1, paddings
// >= 0, an output, and windows that see at least one pixel. Otherwise none: torch::conv2d takes it
// (and says what is wrong, if anything: a CUDA weight beside a CPU input, a double bias).
std::optional<Geometry> gemm_geometry(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                                      at::IntArrayRef stride, at::IntArrayRef padding) {
  if (!simd::cpu_float(x) || !simd::cpu_float(w) || (b.defined() && !simd::cpu_float(b)) || x.dim() != 4 ||
      w.dim() != 4 || w.size(1) != x.size(1))
    return std::nullopt;
  auto sized = [](at::IntArrayRef a) { return a.size() == 1 || a.size() == 2; };
  if (!sized(stride) || !sized(padding)) return std::nullopt;
  for (int64_t s : stride)
    if (s < 1) return std::nullopt;
  for (int64_t p : padding)
    if (p < 0) return std::nullopt;
  const Geometry g = geometry(x, w, stride, padding);
  if (g.ho < 1 || g.wo < 1 || g.ty < 1 || g.tx < 1) return std::nullopt;
  return g;
}

// conv2d_small_output's cap: outputs of at most this many positions per image take position_conv2d.
// resnet34 at 28x28, 1 thread, 2 alternating rounds (train / evaluation img/s): cap 4 (layer3-4)
// 99-100 / 373-376, cap 16 (layer2 too) 109-112 / 412-425, cap 49 (layer1 too) 112 / 415;
// per shape (batch 64), oneDNN wins at 7x7 (3x3 64 -> 64: 20.6 vs 30 ms fwd+bwd). Where the packed
// sums do not run (OpenBLAS per position and kernel row).
constexpr int64_t kSmallOutputPositions = 16;
// The cap where the packed sums run. Evaluation (the weight packed once per pass): resnet34 at 28x28,
// batch 128, 1 thread, 2 x 3 alternating rounds (build/bench_eval_forward): cap 16 2057-2068 img/s, 49
// (layer1's 7x7 too) 2102-2152, 196 (the stem's 14x14 too: oneDNN's one-channel 7x7 is slow) 2233-2374.
// At 112x112 input (layer2 at 14x14) 98-108 against 109-111, at 224x224 (layer3) 26.7-26.9 against
// 26.6-27.5: no loss where oneDNN was good. Training, since the backward runs on the packed kernels too
// (build/bench_conv_layers, batch 64, fwd + bwd, oneDNN's time over the packed sums' on Zen 5): at
// 28x28 layer1 (7x7) 1.13x at 1 thread, 1.22-1.44x at 2; at 56x56 layer1 (14x14) 1.80x / 1.18x, the
// 14x14 -> 7x7 ones 0.96-1.19x / 1.30-1.31x; at 112x112 the 14x14 maps 0.99-1.13x / 1.10-1.28x; at 224x224
// layer3 (14x14) 1.08-1.13x at 2 threads, layer4 (7x7) 0.97x / 1.05x. Not a training convolution with
// fewer than kPackedTrainingMinChannels input channels: its weight gradient's rows are that short (a
// one-channel stem: 1.5 ms in oneDNN, 5.4 ms packed).
constexpr int64_t kPackedPositions = 196;
constexpr int64_t kPackedTrainingMinChannels = 16;

bool needs_autograd(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return torch::GradMode::is_enabled() &&
         (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
}

torch::Tensor position_conv2d(const Geometry& g, const torch::Tensor& x, const torch::Tensor& weight,
                              const torch::Tensor& bias, ConvWeightCache* cache) {
  RECORD_FUNCTION("engine::position_conv2d", std::vector<c10::IValue>({x}));
  if (needs_autograd(x, weight, bias)) {
    // A custom Function takes no undefined tensor in 1.13: no bias is a zero bias needing no grad.
    return PositionConv::apply(x, weight, bias.defined() ? bias : torch::zeros({weight.size(0)}, weight.options()),
                               g.pack());
  }
  if (!packed_conv(g, false)) return position_forward(g, nhwc(x), nhwc(weight), bias).permute({0, 3, 1, 2});
  std::vector<PackedB> local;
  std::vector<PackedB>& taps = taps_for(g, weight, cache, local);
  return packed_position_forward(g, nhwc(x), nhwc(weight), bias, taps).permute({0, 3, 1, 2});
}

torch::Tensor im2col_conv2d(const Geometry& g, const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  RECORD_FUNCTION("engine::im2col_conv2d", std::vector<c10::IValue>({x}));
  if (needs_autograd(x, weight, bias))
    return Im2colConv::apply(x, weight, bias.defined() ? bias : torch::zeros({weight.size(0)}, weight.options()),
                             g.pack());
  return output(g, forward_rows(g, im2col_rows(g, x), weight, bias));
}

}  // namespace

torch::Tensor im2col_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding) {
  if (auto g = gemm_geometry(x, weight, bias, stride, padding)) return im2col_conv2d(*g, x, weight, bias);
  return torch::conv2d(x, weight, bias, stride, padding);
}

torch::Tensor position_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache) {
  release_outside_scope(cache);
  if (blas_sgemm_available())
    if (auto g = gemm_geometry(x, weight, bias, stride, padding)) return position_conv2d(*g, x, weight, bias, cache);
  return torch::conv2d(x, weight, bias, stride, padding);
}

torch::Tensor patchify_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (weight.dim() != 4) return torch::conv2d(x, weight, bias, 1);  // conv2d says what is wrong
  const int64_t k = weight.size(2);
  return im2col_conv2d(x, weight, bias, {k, k}, {0, 0});
}

torch::Tensor conv2d_small_output_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                      at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache,
                                      const torch::Tensor& residual, bool relu) {
  release_outside_scope(cache);
  if (!switched_off("ENGINE_SMALL_CONV_GEMM") && blas_sgemm_available() && !needs_autograd(x, weight, bias) &&
      !(residual.defined() && residual.requires_grad() && torch::GradMode::is_enabled()))
    if (auto g = gemm_geometry(x, weight, bias, stride, padding))
      if (packed_conv(*g, false) && g->ho * g->wo <= kPackedPositions &&
          (!residual.defined() ||
           (simd::cpu_float(residual) && residual.sizes() == c10::IntArrayRef{g->n, g->o, g->ho, g->wo} &&
            residual.is_contiguous(torch::MemoryFormat::ChannelsLast)))) {
        RECORD_FUNCTION("engine::position_conv2d", std::vector<c10::IValue>({x}));
        std::vector<PackedB> local;
        std::vector<PackedB>& taps = taps_for(*g, weight, cache, local);
        const torch::Tensor r = residual.defined() ? residual.permute({0, 2, 3, 1}) : torch::Tensor();
        return packed_position_forward(*g, nhwc(x), nhwc(weight), bias, taps, r, relu).permute({0, 3, 1, 2});
      }
  torch::Tensor y = conv2d_small_output(x, weight, bias, stride, padding, cache);
  if (residual.defined()) y = y.add_(residual);
  return relu ? y.relu_() : y;
}

torch::Tensor conv2d_small_output(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache) {
  release_outside_scope(cache);
  if (!switched_off("ENGINE_SMALL_CONV_GEMM") && blas_sgemm_available())
    if (auto g = gemm_geometry(x, weight, bias, stride, padding)) {
      // On the packed kernels: the first stage of a ResNet on small images too (in evaluation the stem).
      const bool training = needs_autograd(x, weight, bias);
      const bool packed = packed_conv(*g, training) && (g->c >= kPackedTrainingMinChannels || !training);
      if (g->ho * g->wo <= (packed ? kPackedPositions : kSmallOutputPositions))
        return position_conv2d(*g, x, weight, bias, cache);
      // Without oneDNN (LibTorch built without it, or the oneDNN check turned it off), torch::conv2d
      // is LibTorch's own convolution (slow_conv2d); the im2col GEMMs take the larger outputs too.
      // resnet34 pretrain quick on LibTorch 2.6 with oneDNN off, 3 alternating rounds: train 321-331
      // against 281-289 img/s, evaluation 1243-1282 against 992-1041 (bench/RESULTS.md).
      if ((!at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn()) &&
          !switched_off("ENGINE_IM2COL_WITHOUT_ONEDNN"))
        return im2col_conv2d(*g, x, weight, bias);
    }
  return torch::conv2d(x, weight, bias, stride, padding);
}

}  // namespace engine
