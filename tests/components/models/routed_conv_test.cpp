// engine::routed_conv2d, the convolution the models call: torch::conv2d, except the strided patch
// convolutions while the oneDNN check has routed them to the GEMMs (routed_conv.h). Checked here in
// both states, whatever this machine's check decided.
#include "components/models/routed_conv.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "components/models/im2col_conv.h"
#include "tests/components/models/autocast_cpu.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"

using namespace engine;

namespace {

// The routing set for a scope, then put back as the process's check left it.
struct RoutingSwitch {
  bool before = patch_convs_routed();
  explicit RoutingSwitch(bool on) { route_patch_convs(on); }
  ~RoutingSwitch() { route_patch_convs(before); }
};

struct StridedCase {
  const char* name;
  int64_t c, size, cout, k, stride;
  bool channels_last;
};

// Feature maps from real digits: `c` channels mixed from the digit by a fixed 3x3 convolution.
torch::Tensor digit_feature_maps(int64_t n, int64_t c, int64_t size, bool channels_last) {
  namespace F = torch::nn::functional;
  auto x = F::interpolate(test::mnist_batch(n, 7).images,
                          F::InterpolateFuncOptions().size(std::vector<int64_t>{size, size}).mode(torch::kBilinear).align_corners(false));
  if (c > 1) x = torch::conv2d(x, torch::randn({c, 1, 3, 3}), torch::randn({c}), 1, 1);
  return x.contiguous(channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
}

}  // namespace

TEST_CASE("patch_conv: stride above 1 and at least the kernel, in both directions") {
  auto w = [](int64_t kh, int64_t kw) { return torch::zeros({4, 2, kh, kw}); };
  CHECK(patch_conv(w(1, 1), {2, 2}));  // a ResNet shortcut
  CHECK(patch_conv(w(2, 2), {2, 2}));  // a ConvNeXt downsample
  CHECK(patch_conv(w(4, 4), {4}));     // a patchify stem, one stride for both
  CHECK(patch_conv(w(3, 3), {3, 4}));
  CHECK_FALSE(patch_conv(w(1, 1), {1, 1}));  // pointwise
  CHECK_FALSE(patch_conv(w(3, 3), {2, 2}));  // overlapping windows
  CHECK_FALSE(patch_conv(w(7, 7), {2, 2}));  // a ResNet stem
  CHECK_FALSE(patch_conv(w(1, 1), {2, 1}));
  CHECK_FALSE(patch_conv(torch::zeros({4, 2, 2}), {2, 2}));
}

TEST_CASE("engine::routed_conv2d is torch::conv2d unless patch convolutions are routed, and then only those") {
  torch::manual_seed(1);
  auto x = digit_feature_maps(4, 16, 12, true);
  auto w1 = torch::randn({8, 16, 1, 1}), w3 = torch::randn({8, 16, 3, 3}), b = torch::randn({8});
  {
    RoutingSwitch off(false);
    CHECK(torch::equal(routed_conv2d(x, w1, b, {2, 2}, {0, 0}), torch::conv2d(x, w1, b, 2)));
  }
  RoutingSwitch on(true);
  CHECK(torch::equal(routed_conv2d(x, w1, b, {2, 2}, {0, 0}), im2col_conv2d(x, w1, b, {2, 2}, {0, 0})));
  CHECK(torch::equal(routed_conv2d(x, w3, b, {1, 1}, {1, 1}), torch::conv2d(x, w3, b, 1, 1)));
  CHECK(torch::equal(routed_conv2d(x, w3, b, {2, 2}, {1, 1}), torch::conv2d(x, w3, b, 2, 1)));
  CHECK(torch::equal(routed_conv2d(x, w1, b, {1, 1}, {0, 0}), torch::conv2d(x, w1, b)));
  auto xd = x.to(torch::kDouble), wd = w1.to(torch::kDouble);  // no oneDNN in double: torch's own
  CHECK(torch::equal(routed_conv2d(xd, wd, {}, {2, 2}, {0, 0}), torch::conv2d(xd, wd, {}, 2)));
  // Arguments torch refuses are refused with its error.
  CHECK_THROWS_AS(routed_conv2d(x, torch::randn({8, 5, 1, 1}), {}, {2, 2}, {0, 0}), c10::Error);
}

TEST_CASE("routed patch convolutions equal LibTorch's own: float32, bf16 tensors and bf16 autocast, gradients too") {
  const StridedCase cases[] = {
      {"1x1 stride-2 shortcut, channels-last", 24, 8, 40, 1, 2, true},
      {"2x2 stride-2 downsample, NCHW", 40, 10, 80, 2, 2, false},
      {"4x4 stride-4 stem on digits, channels-last", 1, 28, 40, 4, 4, true},
      {"3x3 stride-3, 10x10 (floors)", 12, 10, 16, 3, 3, true},
  };
  torch::manual_seed(2);
  RoutingSwitch on(true);
  for (const StridedCase& s : cases) {
    INFO(std::string(s.name));
    const std::vector<int64_t> stride{s.stride, s.stride}, pad{0, 0};
    const auto x0 = digit_feature_maps(6, s.c, s.size, s.channels_last);
    const auto w0 = torch::randn({s.cout, s.c, s.k, s.k}) * 0.2, b0 = torch::randn({s.cout});
    // Output and gradients of x, w, b through `conv` in `dtype` (autocast: float tensors under bf16 autocast).
    auto run = [&](auto conv, torch::ScalarType dtype, bool autocast) {
      auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(); };  // a copy each run
      auto x = leaf(x0), w = leaf(w0), b = leaf(b0);
      std::optional<test::AutocastCpu> guard;
      if (autocast) guard.emplace(torch::kBFloat16);
      auto y = conv(x, w, b);
      guard.reset();
      y.backward((0.5 + torch::cos(torch::arange(y.numel(), torch::kFloat) * 0.37)).reshape(y.sizes()).to(y.scalar_type()));
      return std::vector<torch::Tensor>{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    auto engine_conv = [&](auto x, auto w, auto b) { return routed_conv2d(x, w, b, stride, pad); };
    auto own_conv = [&](auto x, auto w, auto b) { return torch::conv2d(x, w, b, stride, pad); };
    auto own = [&](torch::ScalarType values) {  // float on values rounded to `values`, LibTorch's own kernels
      test::MkldnnSwitch off(false);
      auto r = run([&](auto x, auto w, auto b) { return own_conv(x.to(values).to(torch::kFloat), w.to(values).to(torch::kFloat), b.to(values).to(torch::kFloat)); },
                   torch::kFloat, false);
      return r;
    };
    const auto ref = own(torch::kFloat), ref16 = own(torch::kBFloat16);
    const auto f = run(engine_conv, torch::kFloat, false);
    for (int i = 0; i < 4; ++i) CHECK_MESSAGE(test::rel_diff(f[i], ref[i]) < 1e-5, "output / x, w, b gradient ", i);
    // bf16 tensors: a bf16 result and bf16 gradients, the float computation rounded.
    const auto h = run(engine_conv, torch::kBFloat16, false);
    for (int i = 0; i < 4; ++i) {
      CHECK((h[i].scalar_type() == torch::kBFloat16));
      CHECK_MESSAGE(test::rel_diff(h[i].to(torch::kFloat), ref16[i]) < 1e-2, "output / x, w, b gradient ", i);
    }
    // Under bf16 autocast: what autocast gives a convolution (bf16 out), float gradients for float
    // leaves, values within bf16 rounding of the float computation on bf16-rounded operands.
    const auto a = run(engine_conv, torch::kFloat, true);
    CHECK((a[0].scalar_type() == torch::kBFloat16));
    for (int i = 1; i < 4; ++i) CHECK((a[i].scalar_type() == torch::kFloat));
    for (int i = 0; i < 4; ++i)
      CHECK_MESSAGE(test::rel_diff(a[i].to(torch::kFloat), ref16[i]) < 1e-2, "output / x, w, b gradient ", i);
  }
}
