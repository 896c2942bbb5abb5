// SyncBatchNorm2d (components/models/batch_norm.h): torch's BatchNorm2d outside a RankStatsScope,
// the same normalisation, gradients and running statistics inside one.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "components/models/batch_norm.h"

#include <condition_variable>
#include <mutex>
#include <thread>
#include "tests/components/models/model_fixtures.h"

using namespace engine;
using test::max_diff;

namespace {

// Real-looking activations: a conv of MNIST-like inputs has a non-zero mean per channel.
torch::Tensor activations(int64_t n, int64_t c, int64_t hw, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn({n, c, hw, hw}) * 1.5 + 3.0).contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

TEST_CASE("SyncBatchNorm2d: one rank's global statistics equal torch's BatchNorm2d, values and gradients") {
  const torch::Tensor x0 = activations(16, 8, 5, 1);
  const torch::Tensor dy = torch::randn_like(x0);
  SyncBatchNorm2d mine(8);
  torch::nn::BatchNorm2d ref(8);
  {
    torch::NoGradGuard g;
    mine->weight.uniform_(0.5, 1.5);
    mine->bias.uniform_(-0.5, 0.5);
    ref->weight.copy_(mine->weight);
    ref->bias.copy_(mine->bias);
  }
  torch::Tensor xa = x0.clone().requires_grad_(), xb = x0.clone().requires_grad_();
  RankSum identity = [](torch::Tensor&) {};  // a world of one
  torch::Tensor ya;
  {
    RankStatsScope scope(&identity);
    ya = mine->forward(xa);
  }
  torch::Tensor yb = ref->forward(xb);
  (ya * dy).sum().backward();
  (yb * dy).sum().backward();
  MESSAGE("y " << max_diff(ya, yb) << ", dx " << max_diff(xa.grad(), xb.grad()) << ", dw "
               << max_diff(mine->weight.grad(), ref->weight.grad()));
  CHECK(max_diff(ya, yb) < 1e-5);
  CHECK(max_diff(xa.grad(), xb.grad()) < 1e-5);
  CHECK(max_diff(mine->weight.grad(), ref->weight.grad()) < 1e-4);
  CHECK(max_diff(mine->bias.grad(), ref->bias.grad()) < 1e-4);
  CHECK(max_diff(mine->running_mean, ref->running_mean) < 1e-6);
  CHECK(max_diff(mine->running_var, ref->running_var) < 1e-6);
  CHECK(mine->num_batches_tracked.item<int64_t>() == 1);
  // Outside a scope and in evaluation: torch's own kernel.
  mine->eval();
  ref->eval();
  {
    torch::NoGradGuard g;
    ref->running_mean.copy_(mine->running_mean);
    ref->running_var.copy_(mine->running_var);
  }
  CHECK(torch::equal(mine->forward(x0), ref->forward(x0)));
  mine->train();
  ref->train();
  CHECK(torch::equal(mine->forward(x0), ref->forward(x0)));  // training, but no scope
}

namespace {

// An all-reduce between two threads of this process: each call waits for the other thread's call
// of the same number, and both leave with the sum.
class TwoThreadSum {
 public:
  void operator()(torch::Tensor& t) {
    std::unique_lock<std::mutex> lock(m_);
    const int64_t round = round_;
    if (!first_.defined()) {
      first_ = t.clone();
      cv_.wait(lock, [&] { return round_ != round; });
      t.copy_(result_);
    } else {
      result_ = first_ + t;
      t.copy_(result_);
      first_ = torch::Tensor();
      ++round_;
      cv_.notify_all();
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  torch::Tensor first_, result_;
  int64_t round_ = 0;
};

}  // namespace

TEST_CASE("SyncBatchNorm2d: two ranks of 8 normalise, back-propagate and track as one of 16") {
  const torch::Tensor x0 = activations(16, 6, 4, 2);
  const torch::Tensor dy = torch::randn_like(x0);
  torch::nn::BatchNorm2d whole(6);
  torch::Tensor xw = x0.clone().requires_grad_();
  torch::Tensor yw = whole->forward(xw);
  (yw * dy).sum().backward();

  TwoThreadSum sum;
  RankSum rank_sum = [&](torch::Tensor& t) { sum(t); };
  SyncBatchNorm2d half[2] = {SyncBatchNorm2d(6), SyncBatchNorm2d(6)};
  torch::Tensor xh[2], yh[2];
  auto rank = [&](int r) {  // rank r holds samples r, r + 2, ... (the sampler's interleaving)
    xh[r] = x0.slice(0, r, 16, 2).clone().requires_grad_();
    RankStatsScope scope(&rank_sum);
    yh[r] = half[r]->forward(xh[r]);
    (yh[r] * dy.slice(0, r, 16, 2)).sum().backward();
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  for (int r = 0; r < 2; ++r) {
    CHECK(max_diff(yh[r], yw.slice(0, r, 16, 2)) < 1e-5);
    CHECK(max_diff(xh[r].grad(), xw.grad().slice(0, r, 16, 2)) < 1e-5);
    CHECK(max_diff(half[r]->running_mean, whole->running_mean) < 1e-6);
    CHECK(max_diff(half[r]->running_var, whole->running_var) < 1e-6);  // unbiased over all 16 x 4 x 4
  }
  // Weight and bias gradients stay per rank; their sum (what the gradient all-reduce forms, up to
  // its 1/world) is the whole batch's.
  CHECK(max_diff(half[0]->weight.grad() + half[1]->weight.grad(), whole->weight.grad()) < 1e-4);
  CHECK(max_diff(half[0]->bias.grad() + half[1]->bias.grad(), whole->bias.grad()) < 1e-4);
  // Per-rank statistics (no scope) would not have matched: the halves' means differ.
  torch::nn::BatchNorm2d alone(6);
  CHECK(max_diff(alone->forward(x0.slice(0, 0, 16, 2)), yw.slice(0, 0, 16, 2)) > 1e-3);
}

TEST_CASE("SyncBatchNorm2d: a zero weight (zero_init_last) and in-place ops on the output, as in a residual block") {
  const torch::Tensor x0 = activations(8, 4, 3, 3), skip = torch::randn_like(x0), dy = torch::randn_like(x0);
  SyncBatchNorm2d mine(4);
  torch::nn::BatchNorm2d ref(4);
  {
    torch::NoGradGuard g;
    mine->weight.zero_();
    ref->weight.zero_();
  }
  RankSum identity = [](torch::Tensor&) {};
  torch::Tensor xa = x0.clone().requires_grad_(), xb = x0.clone().requires_grad_();
  torch::Tensor ya;
  {
    RankStatsScope scope(&identity);
    ya = mine->forward(xa);
  }
  torch::Tensor yb = ref->forward(xb);
  ya.add_(skip);
  yb.add_(skip);
  (torch::relu_(ya) * dy).sum().backward();
  (torch::relu_(yb) * dy).sum().backward();
  MESSAGE("dw " << mine->weight.grad() << " vs " << ref->weight.grad());
  CHECK(max_diff(mine->weight.grad(), ref->weight.grad()) < 1e-4);
  CHECK(max_diff(mine->bias.grad(), ref->bias.grad()) < 1e-4);
  CHECK(max_diff(xa.grad(), xb.grad()) < 1e-6);
}
