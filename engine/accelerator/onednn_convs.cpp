#include "engine/accelerator/onednn_convs.h"

#include <ATen/Context.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "engine/core/env.h"

namespace engine {
namespace {

// One convolution the engine's models run: channels, square map size, output channels, square
// kernel, stride, padding, layout, batch.
struct Probe {
  const char* what;
  int64_t c, size, cout, k, stride, pad;
  bool channels_last;
  int64_t batch = 2;
};

// The shapes of ResNet's and ConvNeXt's convolutions at small sizes (batch 2 unless given): each
// of the first three and the last was wrong on the machine the header names, the others are there
// for the kernels oneDNN picks for them.
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
    // Wrong on that machine at batch 16 (48-62% off; right at batch 2: oneDNN picks its kernel by
    // the number of pixel rows too): a ConvNeXt MLP's second layer, convolutions when
    // ENGINE_MLP_GEMM=0 or without an optimised BLAS.
    {"a 1x1 convolution narrowing 160 channels to 40 (an MLP's second layer), channels-last", 160, 10, 40, 1, 1, 0, true, 16},
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
std::vector<torch::Tensor> run(const Probe& p, torch::ScalarType dtype, torch::ScalarType values) {
  const auto format = p.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
  auto make = [&](at::IntArrayRef sizes, double step, double scale) {
    return wave(sizes, step, scale).to(values).to(dtype).contiguous(format);
  };
  auto x = make({p.batch, p.c, p.size, p.size}, 0.7311, 1.0).requires_grad_();
  auto w = make({p.cout, p.c, p.k, p.k}, 0.377, 0.2).requires_grad_();
  auto y = torch::conv2d(x, w, torch::Tensor(), std::vector<int64_t>{p.stride, p.stride}, std::vector<int64_t>{p.pad, p.pad});
  auto up = make(y.sizes(), 1.913, 1.0);
  auto grads = torch::autograd::grad({y}, {x, w}, {up});
  return {y.detach().to(torch::kFloat), grads[0].to(torch::kFloat), grads[1].to(torch::kFloat)};
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

// max |a - b| / max |b|.
double relative_error(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a - b).abs().max().item<double>() / std::max(scale, 1e-30);
}

}  // namespace

OnednnConvs probe_onednn_convs() {
  OnednnConvs r;
  auto& context = at::globalContext();
  if (!at::hasMKLDNN() || !context.userEnabledMkldnn()) return r;
  torch::AutoGradMode grad_mode(true);
  const char* parts[] = {"output", "input gradient", "weight gradient"};
  for (const Probe& p : kProbes) {
    for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
      std::vector<torch::Tensor> onednn;
      try {
        onednn = run(p, dtype, dtype);
      } catch (const c10::Error&) {
        continue;  // no bf16 convolution on this CPU: nothing runs there to be wrong
      }
      context.setUserEnabledMkldnn(false);
      // Where oneDNN has no bf16 convolution (LibTorch 1.13 and 2.x without AVX-512), LibTorch runs
      // its own bf16 loops with oneDNN on or off: bits equal to the oneDNN-off run mean oneDNN never
      // ran this probe, and its error (those loops sum in bf16: 4% off measured on an AVX2 Zen 3) is
      // not oneDNN's to answer for. The engine's autocast does not send convolutions there anyway
      // (bf16_emulation.h). Such a probe needs no float reference either.
      const bool onednn_ran = dtype == torch::kFloat || !all_equal(onednn, run(p, dtype, dtype));
      std::vector<torch::Tensor> own;  // the reference: LibTorch's own float convolution
      if (onednn_ran) own = run(p, torch::kFloat, dtype);
      context.setUserEnabledMkldnn(true);
      if (!onednn_ran) continue;
      ++r.probes;
      // float: the two differ in summation order only (1e-7 measured); bf16 rounds inputs and
      // outputs to 8 bits (~0.4% of the largest value); the wrong results measured were 13-69% off.
      const double tolerance = dtype == torch::kFloat ? 1e-4 : 0.03;
      for (int i = 0; i < 3 && r.wrong.empty(); ++i) {
        const double err = relative_error(onednn[i], own[i]);
        if (err > tolerance)
          r.wrong = fmt::format("{} {}: its {} was {:.0f}% off", dtype == torch::kFloat ? "float" : "bf16", p.what,
                                parts[i], 100 * err);
      }
    }
  }
  r.checked = true;
  if (!r.wrong.empty()) {
    context.setUserEnabledMkldnn(false);
    r.turned_off = true;
  }
  return r;
}

const OnednnConvs& check_onednn_convs() {
  static const OnednnConvs r = switched_off("ENGINE_ONEDNN_CHECK") ? OnednnConvs{} : probe_onednn_convs();
  return r;
}

std::string onednn_convs_note() {
  const OnednnConvs& r = check_onednn_convs();
  if (!r.turned_off) return "";
  return fmt::format("LibTorch {}'s oneDNN convolutions computed wrong results on this machine ({}, against LibTorch's "
                     "own): oneDNN is off for this run, convolutions run LibTorch's own kernels (correct, slower)",
                     TORCH_VERSION, r.wrong);
}

}  // namespace engine
