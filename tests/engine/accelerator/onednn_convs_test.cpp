// LibTorch's oneDNN convolutions are checked in every process and turned off where they compute
// wrong results (engine/accelerator/onednn_convs.h). tests/support/onednn_setup.cpp ran the check
// before these test cases, as Accelerator::create does in an engine process.
#include "engine/accelerator/onednn_convs.h"

#include <ATen/Context.h>
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <vector>

#include "tests/components/models/model_fixtures.h"

using namespace engine;

using test::MkldnnSwitch;

TEST_CASE("convolutions in an engine process match a double-precision reference: output and both gradients") {
  // The shapes LibTorch 2.6's oneDNN got wrong on a Zen 5 VM (13-69% off, in the output or the
  // input gradient), at a batch other than the probes' own, and their neighbours.
  struct Shape {
    int64_t c, size, cout, k, stride, pad;
  };
  const std::vector<Shape> shapes{{24, 4, 40, 1, 2, 0},  {64, 8, 128, 1, 2, 0}, {1, 40, 40, 4, 4, 0},
                                  {40, 10, 80, 2, 2, 0}, {80, 5, 160, 2, 2, 0}, {160, 2, 320, 2, 2, 0},
                                  {12, 7, 16, 3, 3, 0},  {32, 8, 64, 3, 2, 1},  {64, 14, 64, 3, 1, 1},
                                  {3, 28, 16, 7, 2, 3},  {40, 10, 160, 1, 1, 0}, {160, 10, 40, 1, 1, 0},
                                  {80, 5, 320, 1, 1, 0}, {320, 5, 80, 1, 1, 0}};
  torch::manual_seed(11);
  for (const Shape& s : shapes)
    for (bool channels_last : {true, false}) {
      INFO(s.c << " -> " << s.cout << " channels on " << s.size << "x" << s.size << ", kernel " << s.k << ", stride "
                << s.stride << ", padding " << s.pad << (channels_last ? ", channels-last" : ", NCHW"));
      const auto format = channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
      auto x = torch::randn({16, s.c, s.size, s.size}).contiguous(format).requires_grad_();
      auto w = (torch::randn({s.cout, s.c, s.k, s.k}) * 0.1).contiguous(format).requires_grad_();
      const std::vector<int64_t> stride{s.stride, s.stride}, pad{s.pad, s.pad};
      auto y = torch::conv2d(x, w, torch::Tensor(), stride, pad);
      auto up = torch::randn(y.sizes());
      y.backward(up);
      auto xd = x.detach().to(torch::kDouble).contiguous().requires_grad_();
      auto wd = w.detach().to(torch::kDouble).contiguous().requires_grad_();
      auto yd = torch::conv2d(xd, wd, torch::Tensor(), stride, pad);
      yd.backward(up.to(torch::kDouble));
      CHECK(test::rel_diff(y.detach(), yd.detach()) < 1e-5);
      CHECK(test::rel_diff(x.grad(), xd.grad()) < 1e-5);
      CHECK(test::rel_diff(w.grad(), wd.grad()) < 1e-5);
    }
}

TEST_CASE("the oneDNN check draws nothing from the global generator and leaves oneDNN on where it agrees") {
  const OnednnConvs& first = check_onednn_convs();
  CHECK(&first == &check_onednn_convs());  // once per process
  MESSAGE("oneDNN " << (first.checked ? (first.turned_off ? "off: " + first.wrong : "checked and kept") : "not checked"));
  MkldnnSwitch on(true);
  torch::manual_seed(3);
  const auto expected = torch::rand({16});
  torch::manual_seed(3);
  const OnednnConvs r = probe_onednn_convs();
  CHECK(torch::equal(torch::rand({16}), expected));
  if (!at::hasMKLDNN()) {
    CHECK(!r.checked);
    return;
  }
  CHECK(r.checked);
  CHECK(r.probes >= 10);  // every shape in float at least
  CHECK(r.turned_off == !r.wrong.empty());
  CHECK(at::globalContext().userEnabledMkldnn() == !r.turned_off);
  // The same machine and LibTorch: the same verdict as the check before the first test case.
  if (first.checked) CHECK(r.turned_off == first.turned_off);
}

TEST_CASE("where oneDNN has no bf16 convolution, the check's verdict does not rest on a bf16 probe") {
  // LibTorch 1.13, and 2.x without AVX-512, run bf16 convolutions in their own loops (which sum in
  // bf16, 4% off), oneDNN on or off. The check once blamed oneDNN for them and turned it off for
  // float too on every AVX2 CPU (ConvNeXt's training 13% slower on a Zen 3).
  if (!at::hasMKLDNN()) return;
  auto conv = [](bool onednn) {
    MkldnnSwitch use(onednn);
    auto x = torch::sin(torch::arange(2 * 24 * 4 * 4, torch::kFloat) * 0.73).reshape({2, 24, 4, 4});
    auto w = torch::cos(torch::arange(40 * 24, torch::kFloat) * 0.37).reshape({40, 24, 1, 1}) * 0.2;
    return torch::conv2d(x.to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast),
                         w.to(torch::kBFloat16).contiguous(torch::MemoryFormat::ChannelsLast), torch::Tensor(),
                         std::vector<int64_t>{2, 2});
  };
  const bool onednn_has_bf16 = !torch::equal(conv(true), conv(false));
  MESSAGE(std::string(onednn_has_bf16 ? "oneDNN runs" : "oneDNN does not run") << " bf16 convolutions here");
  MkldnnSwitch on(true);
  const OnednnConvs r = probe_onednn_convs();
  if (!onednn_has_bf16) CHECK_MESSAGE(r.wrong.rfind("bf16", 0) != 0, r.wrong);
}

TEST_CASE("with oneDNN already off the check probes nothing and turns nothing on") {
  MkldnnSwitch off(false);
  const OnednnConvs r = probe_onednn_convs();
  CHECK(!r.checked);
  CHECK(r.probes == 0);
  CHECK(!at::globalContext().userEnabledMkldnn());
}
