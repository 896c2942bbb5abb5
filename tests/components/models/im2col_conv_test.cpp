// Convolutions as GEMMs must agree with torch::conv2d (LibTorch's own kernels): outputs and every gradient.
#include "components/models/im2col_conv.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "components/models/frozen_weights.h"
#include "components/models/gradient_memory.h"
#include "components/models/packed_gemm.h"
#include "engine/core/blas.h"
#include "engine/core/cpu_threads.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/threads.h"

using namespace engine;

namespace {

struct ConvCase {
  const char* name;
  int64_t c, size_h, size_w, cout, kh, kw, sh, sw, ph, pw;
  bool channels_last, x_grad, bias;
};

// Feature maps from real digits (a fixed 3x3 conv mixing them into c channels), at the size asked.
torch::Tensor digit_maps(const ConvCase& c) {
  namespace F = torch::nn::functional;
  auto x = F::interpolate(test::mnist_batch(6, 42).images, F::InterpolateFuncOptions()
                                                                .size(std::vector<int64_t>{c.size_h, c.size_w})
                                                                .mode(torch::kBilinear)
                                                                .align_corners(false));
  if (c.c > 1) x = torch::conv2d(x, torch::randn({c.c, 1, 3, 3}), torch::randn({c.c}), 1, 1);
  return x.contiguous(c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
}

// Output and gradients (input, weight, bias: undefined where not required) for a fixed upstream
// gradient: through `conv`, or torch::conv2d.
template <class Conv>
std::vector<torch::Tensor> run_conv2d(Conv conv, const ConvCase& c, const torch::Tensor& x0, const torch::Tensor& w0,
                                      const torch::Tensor& b0, const torch::Tensor& up) {
  auto x = x0.detach().requires_grad_(c.x_grad), w = w0.detach().requires_grad_();
  auto b = b0.defined() ? b0.detach().requires_grad_() : b0;
  auto y = conv(x, w, b);
  y.backward(up);
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

template <class Conv>
void check_against_conv2d(const ConvCase& c, Conv conv) {
  CAPTURE(c.name);
  const std::vector<int64_t> stride{c.sh, c.sw}, padding{c.ph, c.pw};
  auto ref_conv = [&](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return torch::conv2d(x, w, b, stride, padding);
  };
  // The reference runs LibTorch's own kernels, forward and backward: oneDNN's can be wrong on a
  // machine (onednn_convs.h), and the engine's GEMMs must be right there too.
  auto reference = [&](auto run) {
    test::MkldnnSwitch own(false);
    return run();
  };
  auto x = digit_maps(c);
  auto w = (torch::randn({c.cout, c.c, c.kh, c.kw}) * 0.1)
               .contiguous(c.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
  auto b = c.bias ? torch::randn({c.cout}) : torch::Tensor();
  const auto out = torch::conv2d(x, w, b, stride, padding).sizes().vec();
  auto up = torch::randn(out);
  auto fast = run_conv2d(conv, c, x, w, b, up);
  auto ref = reference([&] { return run_conv2d(ref_conv, c, x, w, b, up); });
  CHECK(fast[0].sizes() == ref[0].sizes());
  CHECK(test::rel_diff(fast[0], ref[0]) < 1e-5);
  REQUIRE(fast[1].defined() == c.x_grad);
  if (c.x_grad) {
    CHECK(fast[1].sizes() == x.sizes());
    CHECK(test::rel_diff(fast[1], ref[1]) < 1e-5);  // pixels no window reads: zero in both
  }
  CHECK(fast[2].sizes() == w.sizes());  // [Cout, Cin, kh, kw]: the parameter's shape
  CHECK(test::rel_diff(fast[2], ref[2]) < 1e-5);  // taps that only see padding: zero in both
  if (c.bias) CHECK(test::rel_diff(fast[3], ref[3]) < 1e-5);
  torch::NoGradGuard g;  // inference path
  CHECK(test::rel_diff(conv(x, w, b), reference([&] { return ref_conv(x, w, b); })) < 1e-5);
}

}  // namespace

TEST_CASE("patchify_conv2d matches a stride-k torch::conv2d on digits, odd sizes and gradients included") {
  torch::manual_seed(4);
  const ConvCase cases[] = {
      {"stem on images (42 = 10 x 4 + 2 floors)", 1, 42, 42, 40, 4, 4, 4, 4, 0, 0, true, false, true},
      {"stem, image gradient too", 1, 40, 40, 40, 4, 4, 4, 4, 0, 0, true, true, true},
      {"downsample 10x10", 40, 10, 10, 80, 2, 2, 2, 2, 0, 0, true, true, true},
      {"downsample 5x5 -> 2x2 (floors)", 80, 5, 5, 160, 2, 2, 2, 2, 0, 0, true, true, true},
      {"downsample 2x2 -> 1x1", 160, 2, 2, 320, 2, 2, 2, 2, 0, 0, true, true, true},
      {"NCHW input, 7x11, k 3, no bias", 12, 7, 11, 16, 3, 3, 3, 3, 0, 0, false, true, false},
  };
  for (const auto& c : cases) check_against_conv2d(c, [](const auto& x, const auto& w, const auto& b) {
      return patchify_conv2d(x, w, b);
    });
  // Other dtypes: torch::conv2d itself.
  auto xd = test::mnist_batch(2, 28).images.to(torch::kDouble), wd = torch::randn({8, 1, 4, 4}, torch::kDouble);
  CHECK(torch::equal(patchify_conv2d(xd, wd, {}), torch::conv2d(xd, wd, {}, 4)));
}

// Convolutions with padding and overlapping windows, ResNet's small maps among them.
const ConvCase padded_cases[] = {
    {"3x3 on a 1x1 map: one live tap of nine", 64, 1, 1, 48, 3, 3, 1, 1, 1, 1, true, true, false},
    {"3x3 stride 2 on 2x2 -> 1x1: four live taps", 32, 2, 2, 48, 3, 3, 2, 2, 1, 1, true, true, false},
    {"3x3 on 2x2: every tap live, windows overlap", 32, 2, 2, 40, 3, 3, 1, 1, 1, 1, true, true, true},
    {"3x3 on 4x4: corner, edge and inner positions", 24, 4, 4, 40, 3, 3, 1, 1, 1, 1, true, true, false},
    {"3x3 on 2x2, 72 -> 136: outputs and input gradients over several column panels, the last partial", 72, 2, 2,
     136, 3, 3, 1, 1, 1, 1, true, true, true},
    {"3x3 stride 2 on 4x4 -> 2x2", 24, 4, 4, 40, 3, 3, 2, 2, 1, 1, true, true, false},
    {"3x3 stride 2 on 7x7 -> 4x4", 16, 7, 7, 24, 3, 3, 2, 2, 1, 1, true, true, false},
    {"1x1 stride 2 shortcut, 4x4 -> 2x2", 24, 4, 4, 40, 1, 1, 2, 2, 0, 0, true, true, false},
    {"1x1 stride 1, pointwise (one GEMM over every pixel), 4x3, bias", 24, 4, 3, 40, 1, 1, 1, 1, 0, 0, true, true, true},
    {"7x7 stride 2 stem on digits, no image gradient", 1, 28, 28, 16, 7, 7, 2, 2, 3, 3, true, false, false},
    {"NCHW input 7x11, 3x3 stride 1, bias", 12, 7, 11, 16, 3, 3, 1, 1, 1, 1, false, true, true},
    {"5x3 kernel, stride (2, 1), padding (2, 1), 6x9", 8, 6, 9, 12, 5, 3, 2, 1, 2, 1, true, true, true},
    {"padding wider than the map: 5x5 on 1x2, padding 3", 8, 1, 2, 12, 5, 5, 1, 1, 3, 3, true, true, true},
    {"positions that see only padding: 1x1 kernel, padding 1", 8, 2, 2, 12, 1, 1, 1, 1, 1, 1, true, true, true},
};

// Every padded case through conv(x, w, b, stride, padding), against torch::conv2d.
template <class Conv>
void check_padded_cases(Conv conv) {
  torch::manual_seed(5);
  for (const auto& c : padded_cases) {
    const std::vector<int64_t> stride{c.sh, c.sw}, padding{c.ph, c.pw};
    check_against_conv2d(c, [&](const auto& x, const auto& w, const auto& b) { return conv(x, w, b, stride, padding); });
  }
}

TEST_CASE("im2col_conv2d matches torch::conv2d with padding and overlapping windows, on ResNet's small maps too") {
  check_padded_cases([](const auto&... a) { return im2col_conv2d(a...); });
}

TEST_CASE("position_conv2d (one GEMM per output position and kernel row) matches torch::conv2d") {
  check_padded_cases([](const auto&... a) { return position_conv2d(a...); });
}

TEST_CASE("position_conv2d on OpenBLAS GEMMs per position and kernel row (ENGINE_PACKED_CONV=0) matches torch::conv2d") {
  setenv("ENGINE_PACKED_CONV", "0", 1);
  check_padded_cases([](const auto&... a) { return position_conv2d(a...); });
  unsetenv("ENGINE_PACKED_CONV");
}

TEST_CASE("position_conv2d's packed passes: the same bits at 1 and 2 threads, every weight-gradient element written into the optimizer's gradient memory") {
  if (packed_gemm_isa() != PackedGemmIsa::avx512 || !blas_sgemm_available()) {
    MESSAGE("no AVX-512 or no optimised BLAS here: the packed passes do not train");
    return;
  }
  torch::manual_seed(9);
  const engine::test::IntraOpThreads threads(1);
  for (const auto& c : padded_cases) {
    CAPTURE(c.name);
    const std::vector<int64_t> stride{c.sh, c.sw}, padding{c.ph, c.pw};
    const torch::Tensor x0 = digit_maps(c);
    const torch::Tensor w0 = (torch::randn({c.cout, c.c, c.kh, c.kw}) * 0.1).contiguous(torch::MemoryFormat::ChannelsLast);
    const torch::Tensor up = torch::randn(torch::conv2d(x0, w0, {}, stride, padding).sizes());
    // Output, input and weight gradients; the weight's gradient memory opened as StepGradients does,
    // filled with NaN so that any element the backward leaves unwritten shows.
    auto run = [&](int count, bool memory) {
      threads.set(count);
      auto x = x0.detach().requires_grad_(), w = w0.detach().clone(torch::MemoryFormat::ChannelsLast).requires_grad_();
      torch::Tensor mem = torch::full_like(w, std::nanf(""));
      if (memory) open_gradient_memory({w}, {mem});
      auto y = position_conv2d(x, w, {}, stride, padding);
      y.backward(up);
      close_gradient_memory();
      if (memory) {
        CHECK(w.grad().data_ptr() == mem.data_ptr());  // the gradient is that memory: no copy after
        CHECK(torch::equal(mem, w.grad()));
      }
      return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad()};
    };
    const auto one = run(1, false), two = run(2, false), in_memory = run(2, true);
    for (size_t i = 0; i < one.size(); ++i) {
      CHECK(torch::equal(one[i], two[i]));
      CHECK(torch::equal(one[i], in_memory[i]));  // every element written: no NaN left
    }
  }
}

TEST_CASE("position_conv2d keeps a packed weight through a FrozenWeights scope and never uses it stale") {
  torch::manual_seed(8);
  const ConvCase c{"3x3 on 4x4", 32, 4, 4, 24, 3, 3, 1, 1, 1, 1, true, false, false};
  const torch::Tensor x = digit_maps(c);
  torch::Tensor w = (torch::randn({24, 32, 3, 3}) * 0.1).contiguous(torch::MemoryFormat::ChannelsLast);
  const torch::Tensor w2 = w.flip({2});
  auto conv = [&](const torch::Tensor& weight, ConvWeightCache* cache) {
    return position_conv2d(x, weight, {}, {1, 1}, {1, 1}, cache);
  };
  torch::NoGradGuard no_grad;
  ConvWeightCache cache;
  const torch::Tensor before = conv(w, nullptr);
  CHECK(test::rel_diff(before, torch::conv2d(x, w, {}, 1, 1)) < 1e-5);
  CHECK(torch::equal(conv(w, &cache), before));  // outside a scope: nothing kept, the same result
  {
    FrozenWeights pass;
    CHECK(torch::equal(conv(w, &cache), before));
    CHECK(torch::equal(conv(w, &cache), before));  // from the kept form
    // Another weight through the same cache (a copy of the layer): its own taps, not w's.
    CHECK(torch::equal(conv(w2, &cache), conv(w2, nullptr)));
    CHECK(torch::equal(conv(w, &cache), before));
    {
      FrozenWeights nested;  // belongs to the outer scope
      CHECK(torch::equal(conv(w, &cache), before));
    }
  }
  // The weight written in place between two passes, as the flat AdamW does (raw memory: no version
  // counter sees it). The next pass must see the new weight.
  float* p = w.data_ptr<float>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = -0.5f * p[i];
  const torch::Tensor after = conv(w, nullptr);
  CHECK(test::rel_diff(after, torch::conv2d(x, w, {}, 1, 1)) < 1e-5);
  {
    FrozenWeights pass;
    CHECK(torch::equal(conv(w, &cache), after));
  }
}

TEST_CASE("FrozenWeights scopes: nested ones share the outermost's id, each new pass has its own") {
  CHECK(frozen_weights_scope() == 0);
  uint64_t first = 0;
  {
    FrozenWeights a;
    first = frozen_weights_scope();
    CHECK(first != 0);
    {
      FrozenWeights b;
      CHECK(frozen_weights_scope() == first);
    }
    CHECK(frozen_weights_scope() == first);
  }
  CHECK(frozen_weights_scope() == 0);
  FrozenWeights c;
  CHECK(frozen_weights_scope() != 0);
  CHECK(frozen_weights_scope() != first);
}

TEST_CASE("conv2d_small_output takes the GEMMs for outputs of at most 196 positions on the packed kernels (in training on AVX-512 with 16 input channels or more), 16 elsewhere, torch::conv2d otherwise where oneDNN runs it") {
  torch::manual_seed(6);
  const auto cl = torch::MemoryFormat::ChannelsLast;
  auto x = torch::randn({4, 16, 5, 5}).contiguous(cl);
  auto w = torch::randn({8, 16, 3, 3}).contiguous(cl);
  // Training: the weight needs a gradient. The outputs compared are the same forward either way.
  auto wg = w.detach().requires_grad_();
  const bool packed = blas_sgemm_available() && packed_gemm_available();
  // Training on the packed kernels: AVX-512 only (on AVX2 their backward is slower than OpenBLAS's).
  const bool packed_training = packed && packed_gemm_isa() == PackedGemmIsa::avx512;
  // 5x5 -> 3x3 (stride 2) and 4x4 -> 4x4: the GEMM path, bit for bit what position_conv2d gives
  // (with a reference BLAS, oneDNN's convolution: faster there).
  auto x4 = x.narrow(2, 0, 4).narrow(3, 0, 4).contiguous(cl);
  for (const auto& [in, stride] : {std::pair{x, int64_t{2}}, std::pair{x4, int64_t{1}}}) {
    auto small = conv2d_small_output(in, wg, {}, {stride, stride}, {1, 1}).detach();
    CHECK(torch::equal(small, blas_sgemm_available() ? position_conv2d(in, wg, {}, {stride, stride}, {1, 1}).detach()
                                                     : torch::conv2d(in, w, {}, stride, 1)));
    CHECK(test::rel_diff(small, torch::conv2d(in, w, {}, stride, 1)) < 1e-5);
  }
  // 5x5 -> 5x5 in training: 25 positions. On the packed kernels with 16 input channels the GEMM path.
  // With 8 (short weight-gradient rows, as a one-channel stem's), or without the packed kernels,
  // torch::conv2d itself where oneDNN runs it; where LibTorch's own convolution would (no oneDNN in
  // LibTorch, or the check turned it off: onednn_convs.h), the im2col GEMMs.
  auto x8 = x.narrow(1, 0, 8).contiguous(cl), w8 = w.narrow(1, 0, 8).contiguous(cl);
  auto w8g = w8.detach().requires_grad_();
  for (bool onednn : {true, false}) {
    test::MkldnnSwitch set(onednn);
    const bool gemms = blas_sgemm_available() && !(at::hasMKLDNN() && onednn);
    auto outside = [&](const torch::Tensor& in, const torch::Tensor& weight) {
      return gemms ? im2col_conv2d(in, weight, {}, {1, 1}, {1, 1}) : torch::conv2d(in, weight, {}, 1, 1);
    };
    auto narrow = conv2d_small_output(x8, w8g, {}, {1, 1}, {1, 1}).detach();
    CHECK_MESSAGE(torch::equal(narrow, outside(x8, w8)), "oneDNN " << (onednn ? "on" : "off"));
    CHECK(test::rel_diff(narrow, torch::conv2d(x8, w8, {}, 1, 1)) < 1e-5);
    auto wide = conv2d_small_output(x, wg, {}, {1, 1}, {1, 1}).detach();
    CHECK_MESSAGE(torch::equal(wide, packed_training ? position_conv2d(x, w, {}, {1, 1}, {1, 1}) : outside(x, w)),
                  "oneDNN " << (onednn ? "on" : "off"));
    CHECK(test::rel_diff(wide, torch::conv2d(x, w, {}, 1, 1)) < 1e-5);
    // ENGINE_IM2COL_WITHOUT_ONEDNN=0: LibTorch's own convolution there (to measure against it).
    setenv("ENGINE_IM2COL_WITHOUT_ONEDNN", "0", 1);
    CHECK(torch::equal(conv2d_small_output(x8, w8g, {}, {1, 1}, {1, 1}).detach(), torch::conv2d(x8, w8, {}, 1, 1)));
    unsetenv("ENGINE_IM2COL_WITHOUT_ONEDNN");
  }
  // Where the packed kernels run, up to 196 positions take position_conv2d (14x14), more (15x15)
  // torch::conv2d where oneDNN runs it: in evaluation (nothing needs a gradient), and in training where
  // they train (AVX-512; on AVX2 torch::conv2d beyond 16 positions).
  if (packed && at::hasMKLDNN()) {
    auto x14 = torch::randn({2, 16, 14, 14}).contiguous(cl);
    auto x15 = torch::randn({2, 16, 15, 15}).contiguous(cl);
    for (const auto& weight : {w, wg}) {
      CAPTURE(weight.requires_grad());
      const bool packs = weight.requires_grad() ? packed_training : packed;
      CHECK(torch::equal(conv2d_small_output(x14, weight, {}, {1, 1}, {1, 1}).detach(),
                         packs ? position_conv2d(x14, w, {}, {1, 1}, {1, 1}) : torch::conv2d(x14, w, {}, 1, 1)));
      CHECK(torch::equal(conv2d_small_output(x15, weight, {}, {1, 1}, {1, 1}).detach(),
                         torch::conv2d(x15, w, {}, 1, 1)));
    }
    CHECK(test::rel_diff(conv2d_small_output(x14, w, {}, {1, 1}, {1, 1}), torch::conv2d(x14, w, {}, 1, 1)) <
          1e-5);
    // Which way a training convolution took, by its backward (the outputs may agree to the bit): the
    // packed one writes the weight's gradient into the optimizer's gradient memory, oneDNN's does not.
    auto wrote_in_place = [&](const torch::Tensor& in) {
      auto weight = w.detach().clone(cl).requires_grad_();
      torch::Tensor memory = torch::empty_like(weight);
      open_gradient_memory({weight}, {memory});
      conv2d_small_output(in, weight, {}, {1, 1}, {1, 1}).sum().backward();
      close_gradient_memory();
      return weight.grad().data_ptr() == memory.data_ptr();
    };
    CHECK(wrote_in_place(x14) == packed_training);
    CHECK_FALSE(wrote_in_place(x15));
  }
  // Arguments conv2d refuses are refused with its error, not computed (a zero stride divides by zero).
  CHECK_THROWS_AS(conv2d_small_output(x, w, {}, {0, 0}, {1, 1}), c10::Error);
  CHECK_THROWS_AS(im2col_conv2d(x, w, {}, {2, 2}, {-1, -1}), c10::Error);
  CHECK_THROWS_AS(position_conv2d(x, w, {}, {2, 2}, {-1, -1}), c10::Error);
  // ENGINE_SMALL_CONV_GEMM=0: torch::conv2d for every size.
  setenv("ENGINE_SMALL_CONV_GEMM", "0", 1);
  auto off = conv2d_small_output(x, w, {}, {2, 2}, {1, 1});
  unsetenv("ENGINE_SMALL_CONV_GEMM");
  CHECK(torch::equal(off, torch::conv2d(x, w, {}, 2, 1)));
}
