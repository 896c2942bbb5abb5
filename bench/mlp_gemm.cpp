// The ConvNeXt MLP products alone, OpenBLAS (torch::addmm / torch::mm, as convnext_mlp.cpp calls
// them without the packed kernels) against packed_gemm.h's kernels with their packing included,
// alternating the two in every round. Build: `ninja -C build bench_mlp_gemm`; run:
// `build/bench_mlp_gemm [batch] [rounds]` (default 64 and 7; one thread unless ENGINE_THREADS).
// Prints per shape the median GFLOP/s of each side over the rounds: forward rows W^T + b (fc1 as
// [rows, C] x [C, 4C], fc2 back), the input gradients g W and the weight gradients g^T x (gemm_at_b,
// nothing to pack; the input gradients' W read in place, as convnext_mlp.cpp does); rows = batch x the stage's pixels
// at 40 x 40 input (convnext_atto: C = 40, 80, 160, 320 on 10x10, 5x5, 2x2, 1x1 maps). A third column,
// "in cache", runs the packed kernel on one block of rows already in cache (96 rows, the blocked MLP's;
// 256 for the weight gradients, their row block), the weight packed outside the timing: the kernel's
// own ceiling, against which the first two show what memory traffic and packing cost.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "components/models/packed_gemm.h"
#include "bench/engine_like.h"
#include "engine/core/blas_kernels.h"

namespace {

double seconds_per_call(const std::function<void()>& fn, double flops) {
  const int calls = std::max(3, static_cast<int>(1.5e8 / flops));
  fn();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::atoll(argv[1]) : 64;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  bench::set_up_like_engine();
  if (!engine::packed_gemm_available()) {
    std::printf("packed kernels unavailable here (no AVX2 with FMA, or ENGINE_PACKED_GEMM=0)\n");
    return 1;
  }
  std::printf("%s; packed kernels %s; batch %lld, %d threads, %d alternating rounds, median GFLOP/s\n",
              engine::blas_kernels_note().c_str(), engine::packed_gemm_isa_name(engine::packed_gemm_isa()),
              static_cast<long long>(batch), at::get_num_threads(), rounds);
  std::printf("%-22s %6s %5s %5s %9s %9s %7s %9s\n", "product", "rows", "k", "n", "OpenBLAS", "packed", "ratio",
              "in cache");
  const int64_t channels[] = {40, 80, 160, 320}, pixels[] = {100, 25, 4, 1};
  double total_blas = 0, total_packed = 0;
  torch::manual_seed(0);
  for (int s = 0; s < 4; ++s) {
    const int64_t m = batch * pixels[s], c = channels[s];
    enum Kind { kForward, kInputGrad, kWeightGrad };
    struct Product {
      const char* name;
      int64_t k, n;
      Kind kind;
    };
    // Weight gradients as [n, k] = g^T x over the m rows: g [m, n], x [m, k].
    const Product products[] = {{"fc1 rows W1^T + b1", c, 4 * c, kForward},
                                {"fc2 rows W2^T + b2", 4 * c, c, kForward},
                                {"fc2 input grad g W2", c, 4 * c, kInputGrad},
                                {"fc1 input grad g W1", 4 * c, c, kInputGrad},
                                {"fc2 weight grad g^T a", 4 * c, c, kWeightGrad},
                                {"fc1 weight grad g^T t", c, 4 * c, kWeightGrad}};
    for (const Product& p : products) {
      // Enough different left-hand matrices that each call finds its own out of cache (>= 64 MiB in
      // all), as in a training step where the activations come from the previous layer.
      const int64_t copies = std::max<int64_t>(2, (64 << 20) / (m * p.k * 4));
      std::vector<torch::Tensor> as;
      for (int64_t i = 0; i < copies; ++i) as.push_back(torch::randn({m, p.k}));
      int64_t next = 0;
      auto fresh = [&]() -> const torch::Tensor& { return as[next++ % copies]; };
      // The weight as the layer stores it: [n, k] for the forward (used transposed), [k, n] for
      // the input gradient (g [m, k] x W [k, n]).
      const bool forward = p.kind == kForward;
      torch::Tensor w = forward ? torch::randn({p.n, p.k}) : torch::randn({p.k, p.n});
      torch::Tensor g = torch::randn({m, p.n});  // the weight gradients' other operand
      torch::Tensor bias = torch::randn({p.n}), out = torch::empty({m, p.n});
      const double flops = 2.0 * m * p.k * p.n;
      std::vector<double> blas, packed, hot;
      const int64_t hot_rows = std::min<int64_t>(m, p.kind == kWeightGrad ? 256 : 96);
      const engine::PackedB hot_b = p.kind == kWeightGrad ? engine::PackedB()
                                    : forward ? engine::PackedB::transposed(w.data_ptr<float>(), p.n, p.k, p.k)
                                              : engine::PackedB::in_place(w.data_ptr<float>(), p.k, p.n, p.n);
      torch::Tensor hot_out = torch::empty({std::max(hot_rows, p.n), std::max(p.k, p.n)});
      for (int r = 0; r < rounds; ++r) {
        hot.push_back(seconds_per_call(
            [&] {
              if (p.kind == kWeightGrad)
                engine::gemm_at_b(hot_rows, g.data_ptr<float>(), p.n, p.n, as[0].data_ptr<float>(), p.k, p.k,
                                  hot_out.data_ptr<float>(), p.k);
              else
                engine::gemm_packed_serial(hot_rows, as[0].data_ptr<float>(), p.k, hot_b,
                                           forward ? bias.data_ptr<float>() : nullptr, hot_out.data_ptr<float>(), p.n);
            },
            2.0 * hot_rows * p.k * p.n));
        blas.push_back(seconds_per_call(
            [&] {
              out = forward ? torch::addmm(bias, fresh(), w.t())
                            : p.kind == kInputGrad ? torch::mm(fresh(), w) : torch::mm(g.t(), fresh());
            }, flops));
        packed.push_back(seconds_per_call(
            [&] {
              if (p.kind == kWeightGrad) {
                torch::Tensor gw = torch::empty({p.n, p.k});
                engine::gemm_at_b(m, g.data_ptr<float>(), p.n, p.n, fresh().data_ptr<float>(), p.k, p.k,
                                  gw.data_ptr<float>(), p.k);
                return;
              }
              const engine::PackedB b = forward ? engine::PackedB::transposed(w.data_ptr<float>(), p.n, p.k, p.k)
                                                  : engine::PackedB::in_place(w.data_ptr<float>(), p.k, p.n, p.n);
              torch::Tensor y = torch::empty({m, p.n});
              engine::gemm_packed(m, fresh().data_ptr<float>(), p.k, b, forward ? bias.data_ptr<float>() : nullptr,
                                  y.data_ptr<float>(), p.n);
            },
            flops));
      }
      const double tb = bench::median(blas), tp = bench::median(packed);
      total_blas += tb;
      total_packed += tp;
      std::printf("%-22s %6lld %5lld %5lld %9.1f %9.1f %6.2fx %9.1f\n", p.name, static_cast<long long>(m),
                  static_cast<long long>(p.k), static_cast<long long>(p.n), flops / tb / 1e9, flops / tp / 1e9,
                  tb / tp, 2.0 * hot_rows * p.k * p.n / bench::median(hot) / 1e9);
    }
  }
  std::printf("all products, one step's worth each: OpenBLAS %.3f ms, packed %.3f ms: %.2fx\n", total_blas * 1e3,
              total_packed * 1e3, total_blas / total_packed);
  return 0;
}
