#include "engine/accelerator/onednn_convs.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "components/models/routed_conv.h"
#include "engine/core/env.h"

namespace engine {
namespace {

// One convolution the engine's models run: channels, square map size, output channels, square
// kernel, stride, padding, layout.
struct Probe {
  const char* what;
  int64_t c, size, cout, k, stride, pad;
  bool channels_last;
  bool patch() const { return stride > 1 && stride >= k; }  // routed_conv.h's patch_conv
};

// The shapes of ResNet's and ConvNeXt's convolutions at small sizes (batch 2): each of the first
// three was wrong on the machine the header names, the others are there for the kernels oneDNN
// picks for them.
const Probe kProbes[] = {
    {"a 1x1 stride-2 convolution (a ResNet shortcut), channels-last", 24, 4, 40, 1, 2, 0, true},
    {"a 2x2 stride-2 convolution (a ConvNeXt downsample)", 40, 10, 80, 2, 2, 0, false},
    {"a 2x2 stride-2 convolution (a ConvNeXt downsample), channels-last", 40, 10, 80, 2, 2, 0, true},
    {"a 4x4 stride-4 convolution (a patchify stem)", 1, 40, 40, 4, 4, 0, false},
    {"a 4x4 stride-4 convolution (a patchify stem), channels-last", 3, 40, 40, 4, 4, 0, true},
    {"a 3x3 convolution, channels-last", 32, 8, 32, 3, 1, 1, true},
    {"a 3x3 stride-2 convolution, channels-last", 32, 8, 64, 3, 2, 1, true},
    {"a 7x7 stride-2 convolution (a ResNet stem), channels-last", 3, 28, 16, 7, 2, 3, true},
    {"a 1x1 convolution, channels-last", 40, 10, 160, 1, 1, 0, true},
};

// Deterministic values in [-scale, scale], without touching the global random generator (a probe
// must not change what a seeded run draws).
torch::Tensor wave(at::IntArrayRef sizes, double step, double scale) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return (torch::sin(torch::arange(n, torch::kDouble) * step + 0.1) * scale).to(torch::kFloat).reshape(sizes);
}

// Output, input gradient and weight gradient of one probe in `dtype`, in float. Values are rounded
// to `values` first, so that a float reference sees the inputs a bf16 convolution sees.
// `routed`: through engine::routed_conv2d (routed_conv.h) rather than torch::conv2d.
std::vector<torch::Tensor> run(const Probe& p, torch::ScalarType dtype, torch::ScalarType values, bool routed) {
  const auto format = p.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  auto make = [&](at::IntArrayRef sizes, double step, double scale) {
    return wave(sizes, step, scale).to(values).to(dtype).contiguous(format);
  };
  auto x = make({2, p.c, p.size, p.size}, 0.7311, 1.0).requires_grad_();
  auto w = make({p.cout, p.c, p.k, p.k}, 0.377, 0.2).requires_grad_();
  const std::vector<int64_t> stride{p.stride, p.stride}, pad{p.pad, p.pad};
  auto y = routed ? routed_conv2d(x, w, torch::Tensor(), stride, pad) : torch::conv2d(x, w, torch::Tensor(), stride, pad);
  auto up = make(y.sizes(), 1.913, 1.0);
  auto grads = torch::autograd::grad({y}, {x, w}, {up});
  return {y.detach().to(torch::kFloat), grads[0].to(torch::kFloat), grads[1].to(torch::kFloat)};
}

// max |a - b| / max |b|.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / std::max(scale, 1e-30);
}

// Where a probe's output and gradients in `dtype` and the float reference's differ beyond rounding,
// which part and by how much; "" where they agree.
std::string disagreement(const Probe& p, torch::ScalarType dtype, const std::vector<torch::Tensor>& tested,
                         const std::vector<torch::Tensor>& own) {
  const char* parts[] = {"output", "input gradient", "weight gradient"};
  // float: the two differ in summation order only (1e-7 measured); bf16 rounds inputs and
  // outputs to 8 bits (~0.4% of the largest value); the wrong results measured were 13-69% off.
  const double tolerance = dtype == torch::kFloat ? 1e-4 : 0.03;
  for (int i = 0; i < 3; ++i)
    if (const double err = relative_error(tested[i], own[i]); err > tolerance)
      return fmt::format("{} {}: its {} was {:.0f}% off", dtype == torch::kFloat ? "float" : "bf16", p.what, parts[i],
                         100 * err);
  return "";
}

}  // namespace

OnednnConvs probe_onednn_convs() {
  OnednnConvs r;
  auto& context = at::globalContext();
  if (!at::hasMKLDNN() || !context.userEnabledMkldnn()) return r;
  torch::AutoGradMode grad_mode(true);
  // The first disagreement among the patch convolutions (stride > 1, stride >= kernel) and among
  // the others; `routed` compares the engine's routed convolution (routed_conv.h) instead.
  std::string wrong_patch, wrong_other;
  auto compare = [&](bool routed, bool count) {
    for (const Probe& p : kProbes) {
      if (routed && !p.patch()) continue;
      for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
        std::vector<torch::Tensor> tested;
        try {
          tested = run(p, dtype, dtype, routed);
        } catch (const c10::Error&) {
          continue;  // no bf16 convolution on this CPU: nothing runs there to be wrong
        }
        context.setUserEnabledMkldnn(false);
        const auto own = run(p, torch::kFloat, dtype, false);  // the reference: LibTorch's own float convolution
        context.setUserEnabledMkldnn(true);
        if (count) ++r.probes;
        std::string& wrong = p.patch() ? wrong_patch : wrong_other;
        if (const std::string w = disagreement(p, dtype, tested, own); !w.empty() && wrong.empty()) wrong = w;
      }
    }
  };
  compare(false, true);
  r.checked = true;
  if (wrong_other.empty() && !wrong_patch.empty() && !switched_off("ENGINE_PATCH_CONV_ROUTING")) {
    // Only patch convolutions are wrong: route them to the engine's GEMMs, and check those.
    const std::string found = wrong_patch;
    route_patch_convs(true);
    wrong_patch.clear();
    compare(true, false);
    if (wrong_patch.empty()) {
      r.patches_routed = true;
      r.wrong = found;
      return r;
    }
    route_patch_convs(false);
    wrong_patch = found;
  }
  if (!wrong_other.empty() || !wrong_patch.empty()) {
    context.setUserEnabledMkldnn(false);
    r.turned_off = true;
    r.wrong = wrong_other.empty() ? wrong_patch : wrong_other;
  }
  return r;
}

const OnednnConvs& check_onednn_convs() {
  static const OnednnConvs r = switched_off("ENGINE_ONEDNN_CHECK") ? OnednnConvs{} : probe_onednn_convs();
  return r;
}

std::string onednn_convs_note() {
  const OnednnConvs& r = check_onednn_convs();
  if (r.patches_routed)
    return fmt::format("LibTorch {}'s oneDNN computed strided patch convolutions wrong on this machine ({}, against "
                       "LibTorch's own): those run the engine's GEMMs in float32, oneDNN the others (they agreed)",
                       TORCH_VERSION, r.wrong);
  if (!r.turned_off) return "";
  return fmt::format("LibTorch {}'s oneDNN convolutions computed wrong results on this machine ({}, against LibTorch's "
                     "own): oneDNN is off for this run, convolutions run LibTorch's own kernels (correct, slower)",
                     TORCH_VERSION, r.wrong);
}

}  // namespace engine
