// resnet34's convolutions in training on the 28 x 28 digits (recipes/digits_png_resnet34_*.toml), layer
// shape by layer shape: the engine's packed position sums (position_conv2d) against LibTorch's
// convolution (oneDNN), forward and forward + backward, batch 64, channels-last, at the process's
// intra-op threads. Says per shape which way is faster and by how much, and what a training step's
// convolutions cost each way (each shape times the number of resnet34 layers that have it). Input and
// weights are normal draws: a convolution's time does not depend on the values. Build: `ninja -C build
// bench_conv_layers`; run: `OMP_WAIT_POLICY=PASSIVE build/bench_conv_layers [rounds] [batch] [name part] [pos|dnn]`
// (default 7 rounds, batch 64, every shape, both ways; one thread unless ENGINE_THREADS). The two ways alternate in every round.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/engine_like.h"
#include "components/models/im2col_conv.h"

namespace {

struct Shape {
  const char* layer;
  int count;  // resnet34 layers of this shape
  int64_t cin, cout, size, kernel, stride, pad;
  bool input_grad;  // false for the stem (its input is the image)
};

// resnet34 at 28 x 28: the stem 7x7/2 to 14x14, max pool to 7x7, then layer1 7x7, layer2 4x4, layer3
// 2x2, layer4 1x1 (each stage's first block strides 2, with a 1x1 / 2 shortcut convolution).
const std::vector<Shape> kShapes = {
    {"stem 7x7/2 1->64 @28", 1, 1, 64, 28, 7, 2, 3, false},
    {"layer1 3x3 64->64 @7", 6, 64, 64, 7, 3, 1, 1, true},
    {"layer2 3x3/2 64->128 @7", 1, 64, 128, 7, 3, 2, 1, true},
    {"layer2 1x1/2 64->128 @7", 1, 64, 128, 7, 1, 2, 0, true},
    {"layer2 3x3 128->128 @4", 7, 128, 128, 4, 3, 1, 1, true},
    {"layer3 3x3/2 128->256 @4", 1, 128, 256, 4, 3, 2, 1, true},
    {"layer3 1x1/2 128->256 @4", 1, 128, 256, 4, 1, 2, 0, true},
    {"layer3 3x3 256->256 @2", 11, 256, 256, 2, 3, 1, 1, true},
    {"layer4 3x3/2 256->512 @2", 1, 256, 512, 2, 3, 2, 1, true},
    {"layer4 1x1/2 256->512 @2", 1, 256, 512, 2, 1, 2, 0, true},
    {"layer4 3x3 512->512 @1", 5, 512, 512, 1, 3, 1, 1, true},
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Forward and forward + backward milliseconds of one call of `conv`.
struct Times {
  double forward, total;
};

template <class Conv>
Times time_once(const torch::Tensor& x, const torch::Tensor& w, Conv conv) {
  const double t0 = now_ms();
  torch::Tensor y = conv(x, w);
  const double t1 = now_ms();
  y.backward(torch::ones_like(y));
  const double t2 = now_ms();
  return {t1 - t0, t2 - t0};
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 64;
  const std::string only = argc > 3 ? argv[3] : "";  // a part of the shapes' names: those alone
  const std::string way = argc > 4 ? argv[4] : "";    // pos or dnn: that way alone (for perf)
  bench::set_up_like_engine();
  torch::manual_seed(0);
  std::printf("resnet34 convolutions at 28x28, batch %lld, %d intra-op thread(s), medians of %d rounds (ms)\n",
              static_cast<long long>(batch), at::get_num_threads(), rounds);
  std::printf("%-26s %5s | %8s %8s | %8s %8s | %6s\n", "shape", "count", "pos fwd", "pos all", "dnn fwd", "dnn all",
              "dnn/pos");
  double step_pos = 0, step_dnn = 0;
  for (const Shape& s : kShapes) {
    if (std::string(s.layer).find(only) == std::string::npos) continue;
    torch::Tensor x = torch::randn({batch, s.cin, s.size, s.size}).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor w = (torch::randn({s.cout, s.cin, s.kernel, s.kernel}) * 0.05).contiguous(at::MemoryFormat::ChannelsLast);
    x.set_requires_grad(s.input_grad);
    w.set_requires_grad(true);
    const std::vector<int64_t> stride{s.stride, s.stride}, pad{s.pad, s.pad};
    auto pos = [&](const torch::Tensor& a, const torch::Tensor& b) {
      return engine::position_conv2d(a, b, torch::Tensor(), stride, pad);
    };
    auto dnn = [&](const torch::Tensor& a, const torch::Tensor& b) {
      return torch::conv2d(a, b, torch::Tensor(), stride, pad);
    };
    std::vector<double> pf, pa, df, da;
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      x.mutable_grad() = torch::Tensor();
      w.mutable_grad() = torch::Tensor();
      const Times p = way != "dnn" ? time_once(x, w, pos) : Times{0, 0};
      x.mutable_grad() = torch::Tensor();
      w.mutable_grad() = torch::Tensor();
      const Times d = way != "pos" ? time_once(x, w, dnn) : Times{0, 0};
      if (r == 0) continue;
      pf.push_back(p.forward);
      pa.push_back(p.total);
      df.push_back(d.forward);
      da.push_back(d.total);
    }
    const double pam = bench::median(pa), dam = bench::median(da);
    std::printf("%-26s %5d | %8.3f %8.3f | %8.3f %8.3f | %6.2f\n", s.layer, s.count, bench::median(pf), pam,
                bench::median(df), dam, dam / pam);
    step_pos += s.count * pam;
    step_dnn += s.count * dam;
  }
  std::printf("a step's convolutions, forward + backward: positions %.1f ms, oneDNN %.1f ms\n", step_pos, step_dnn);
  return 0;
}
