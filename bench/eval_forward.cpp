// The evaluation forward alone, without loader, metrics or gathers: convnext_atto (in_chans 1, 10
// classes) on real MNIST digits at 40 x 40 (data/mnist/train.csv, as recipes/mnist_convnext.toml
// evaluates them), or resnet34 at their own 28 x 28 (as recipes/digits_png_resnet34_*.toml: the
// same digits as PNGs), four ways (see `ways` below: as the Evaluator runs it, and three others),
// alternating in every round so that a noisy machine slows all alike. Build: `ninja -C build
// bench_eval_forward`; run: `build/bench_eval_forward [batch] [rounds] [convnext_atto|resnet34]`
// (default 128 = the recipes' evaluation batch, 9 rounds, convnext_atto; one thread unless
// ENGINE_THREADS). Prints each way's median images/s, its ratio to the Evaluator's way and GFLOP/s
// (the model's multiply-adds per image, counted layer by layer below, x 2), and how far its logits
// are from the Evaluator's (the same bits, or the largest difference).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "components/models/convnext.h"
#include "components/models/frozen_weights.h"
#include "components/models/resnet.h"
#include "bench/engine_like.h"
#include "engine/core/blas_kernels.h"

namespace {

// `n` digits of train.csv as [n, 1, size, size], scaled and normalised as the recipes do (resized
// bilinearly from 28 x 28 here: the forward's cost does not depend on the interpolation).
torch::Tensor digits(int64_t n, int64_t size) {
  std::ifstream in("data/mnist/train.csv");
  if (!in) {
    std::fprintf(stderr, "data/mnist/train.csv not found: run from the repository root after tools/setup.sh\n");
    std::exit(1);
  }
  std::string line;
  std::getline(in, line);
  torch::Tensor px = torch::empty({n, 784});
  auto a = px.accessor<float, 2>();
  for (int64_t r = 0; r < n && std::getline(in, line); ++r) {
    std::stringstream ss(line);
    std::string cell;
    std::getline(ss, cell, ',');  // label
    for (int64_t c = 0; c < 784 && std::getline(ss, cell, ','); ++c) a[r][c] = std::stof(cell) / 255.0f;
  }
  namespace F = torch::nn::functional;
  torch::Tensor x = ((px - 0.1310) / 0.30854).view({n, 1, 28, 28});
  if (size == 28) return x.contiguous();
  return F::interpolate(x, F::InterpolateFuncOptions().size(std::vector<int64_t>{size, size}).mode(torch::kBilinear).align_corners(false))
      .contiguous();
}

// convnext_atto at 40 x 40, multiply-adds per image: stem 4x4/4 1 -> 40 on 10x10 (64 K); per block
// the depthwise 7x7 and the MLP C -> 4C -> C on the stage's map: stage 0 C 40 on 10x10 x 2 blocks
// (2.95 M), downsample 2x2/2 40 -> 80 (0.32 M), stage 1 80 on 5x5 x 2 (2.76 M), downsample 80 -> 160
// onto 2x2 (0.20 M), stage 2 160 on 2x2 x 6 (the 7x7 reaches 3x3 taps; 4.95 M), downsample 160 -> 320
// onto 1x1 (0.20 M), stage 3 320 on 1x1 x 2 (1.64 M), head 320 -> 10; LayerNorm, GELU and pooling
// not counted. About 13.1 M multiply-adds.
constexpr double kConvNeXtFlops = 2 * 13.1e6;
// resnet34 at 28 x 28, multiply-adds per image as its kernels compute them (taps that only read the
// zero padding skipped, as the engine's small-map GEMMs do): stem 7x7/2 1 -> 64 onto 14x14 (0.6 M),
// layer1 6 x 3x3 64 -> 64 on 7x7 (10.8 M), layer2 on 4x4 (12.4 M), layer3 on 2x2 (11.9 M), layer4 on
// 1x1 (1.8 M, the centre taps only), fc. About 37.5 M; the dense taps (what oneDNN multiplies) ~70 M.
constexpr double kResNetFlops = 2 * 37.5e6;

// The benchmarked model, its input size and multiply-adds.
struct Bench {
  std::shared_ptr<engine::Model> model;
  int64_t size;
  double flops;
};
Bench make_bench(const std::string& name) {
  torch::manual_seed(42);
  if (name == "resnet34") {
    engine::ResNetOptions o;
    o.in_chans = 1;
    o.num_classes = 10;
    std::shared_ptr<engine::Model> model = engine::make_resnet("resnet34", o);
    // timm's zero_init_last starts every residual branch at zero (its last BatchNorm's weight), which
    // would leave the logits blind to most convolutions: weights of 1, as after some training, so
    // that the logits comparison below sees every layer.
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find(".bn") != std::string::npos && p.key().size() > 7 &&
          p.key().compare(p.key().size() - 7, 7, ".weight") == 0)
        p.value().fill_(1.0);
    return {model, 28, kResNetFlops};
  }
  if (name != "convnext_atto") {
    std::fprintf(stderr, "unknown model '%s': convnext_atto or resnet34\n", name.c_str());
    std::exit(2);
  }
  engine::ConvNeXtOptions o;
  o.in_chans = 1;
  o.num_classes = 10;
  return {engine::make_convnext(engine::convnext_archs().front(), o), 40, kConvNeXtFlops};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 128;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  const std::string name = argc > 3 ? argv[3] : "convnext_atto";
  bench::set_up_like_engine();
  const Bench subject = make_bench(name);
  subject.model->eval();
  const int64_t batches = 8;
  const torch::Tensor images = digits(batch * batches, subject.size);

  // The ways: as the Evaluator runs it (no_grad inside a FrozenWeights scope per pass: the packed
  // convolution weights made once per pass), no_grad without the scope (packed at every batch), the
  // small-map convolutions on OpenBLAS GEMMs instead (ENGINE_PACKED_CONV=0), and InferenceMode.
  struct Way {
    const char* name;
    bool frozen, inference, openblas;
    std::vector<double> rates;
    torch::Tensor logits;
  };
  std::vector<Way> ways{{"evaluator", true, false, false, {}, {}},
                        {"per-batch", false, false, false, {}, {}},
                        {"openblas", true, false, true, {}, {}},
                        {"inference", true, true, false, {}, {}}};
  auto pass = [&](Way& w) {  // one evaluation pass over the batches, as Evaluator::run
    std::vector<torch::Tensor> out;
    if (w.openblas) setenv("ENGINE_PACKED_CONV", "0", 1);
    const auto t0 = std::chrono::steady_clock::now();
    {
      std::optional<engine::FrozenWeights> frozen;
      if (w.frozen) frozen.emplace();
      for (int64_t b = 0; b < batches; ++b) {
        const torch::Tensor x = images.narrow(0, b * batch, batch);
        if (w.inference) {
          c10::InferenceMode guard;
          out.push_back(subject.model->forward(x));
        } else {
          torch::NoGradGuard guard;
          out.push_back(subject.model->forward(x));
        }
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    unsetenv("ENGINE_PACKED_CONV");
    w.logits = torch::cat(out);
    return static_cast<double>(batch * batches) / s;
  };
  for (auto& w : ways) pass(w);  // warm-up
  for (int r = 0; r < rounds; ++r)
    for (auto& w : ways) w.rates.push_back(pass(w));
  std::printf("%s; %s at %lldx%lld, batch %lld x %lld batches, %d threads, %d alternating rounds\n",
              engine::blas_kernels_note().c_str(), name.c_str(), static_cast<long long>(subject.size),
              static_cast<long long>(subject.size), static_cast<long long>(batch), static_cast<long long>(batches),
              at::get_num_threads(), rounds);
  const double base = bench::median(ways[0].rates);
  for (auto& w : ways)
    std::printf("%-10s %8.1f images/s  %5.3fx  %5.1f GFLOP/s  logits %s\n", w.name, bench::median(w.rates),
                bench::median(w.rates) / base, bench::median(w.rates) * subject.flops / 1e9,
                torch::equal(w.logits, ways[0].logits)
                    ? "same bits"
                    : ("max difference " + std::to_string((w.logits - ways[0].logits).abs().max().item<float>())).c_str());
  return 0;
}
