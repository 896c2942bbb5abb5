// resnet34's convolutions in training on the 28 x 28 digits (recipes/digits_png_resnet34_*.toml; other
// sizes on request), layer shape by layer shape: the engine's packed position sums (position_conv2d)
// against LibTorch's convolution (oneDNN), forward and forward + backward, batch 64, channels-last, at
// the process's intra-op threads. Says per shape which way is faster and by how much, and what a
// training step's convolutions cost each way (each shape times the number of resnet34 layers that have
// it). Input and weights are normal draws: a convolution's time does not depend on the values. Build:
// `ninja -C build bench_conv_layers`; run: `OMP_WAIT_POLICY=PASSIVE build/bench_conv_layers [rounds]
// [batch] [size] [name part] [pos|dnn]` (default 7 rounds, batch 64, 28 x 28 images, every shape, both
// ways; one thread unless ENGINE_THREADS). The two ways alternate in every round.
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
  std::string layer;
  int count;  // resnet34 layers of this shape
  int64_t cin, cout, size, kernel, stride, pad;
  bool input_grad;  // false for the stem (its input is the image)
};

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

// resnet34's convolutions on one-channel images of `size` x `size` (28: the stem 7x7/2 to 14x14, the max
// pool to 7x7, then layer1 at 7x7, layer2 4x4, layer3 2x2, layer4 1x1; each stage's first block strides
// 2, with a 1x1 / 2 shortcut convolution).
std::vector<Shape> resnet34_shapes(int64_t size) {
  auto at = [](int64_t s) { return " @" + std::to_string(s); };
  std::vector<Shape> shapes;
  shapes.push_back({"stem 7x7/2 1->64" + at(size), 1, 1, 64, size, 7, 2, 3, false});
  int64_t map = conv_out(conv_out(size, 7, 2, 3), 3, 2, 1);  // after the stem and the max pool
  shapes.push_back({"layer1 3x3 64->64" + at(map), 6, 64, 64, map, 3, 1, 1, true});
  const int64_t widths[] = {64, 128, 256, 512}, blocks[] = {3, 4, 6, 3};
  for (int st = 1; st < 4; ++st) {
    const int64_t cin = widths[st - 1], c = widths[st], next = conv_out(map, 3, 2, 1);
    const std::string name = "layer" + std::to_string(st + 1) + " ";
    shapes.push_back({name + "3x3/2 " + std::to_string(cin) + "->" + std::to_string(c) + at(map), 1, cin, c, map, 3, 2,
                      1, true});
    shapes.push_back({name + "1x1/2 " + std::to_string(cin) + "->" + std::to_string(c) + at(map), 1, cin, c, map, 1, 2,
                      0, true});
    shapes.push_back({name + "3x3 " + std::to_string(c) + "->" + std::to_string(c) + at(next),
                      static_cast<int>(2 * blocks[st] - 1), c, c, next, 3, 1, 1, true});
    map = next;
  }
  return shapes;
}

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
  const int64_t size = argc > 3 ? std::atoll(argv[3]) : 28;
  const std::string only = argc > 4 ? argv[4] : "";  // a part of the shapes' names: those alone
  const std::string way = argc > 5 ? argv[5] : "";   // pos or dnn: that way alone (for perf)
  bench::set_up_like_engine();
  torch::manual_seed(0);
  std::printf("resnet34 convolutions at %lldx%lld, batch %lld, %d intra-op thread(s), medians of %d rounds (ms)\n",
              static_cast<long long>(size), static_cast<long long>(size), static_cast<long long>(batch),
              at::get_num_threads(), rounds);
  std::printf("%-26s %5s | %8s %8s | %8s %8s | %6s\n", "shape", "count", "pos fwd", "pos all", "dnn fwd",
              "dnn all", "dnn/pos");
  double step_pos = 0, step_dnn = 0;
  for (const Shape& s : resnet34_shapes(size)) {
    if (s.layer.find(only) == std::string::npos) continue;
    torch::Tensor x = torch::randn({batch, s.cin, s.size, s.size}).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor w =
        (torch::randn({s.cout, s.cin, s.kernel, s.kernel}) * 0.05).contiguous(at::MemoryFormat::ChannelsLast);
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
    std::printf("%-26s %5d | %8.3f %8.3f | %8.3f %8.3f | %6.2f\n", s.layer.c_str(), s.count, bench::median(pf), pam,
                bench::median(df), dam, dam / pam);
    step_pos += s.count * pam;
    step_dnn += s.count * dam;
  }
  std::printf("a step's convolutions, forward + backward: positions %.1f ms, oneDNN %.1f ms\n", step_pos, step_dnn);
  return 0;
}
