// SyncBatchNorm2d (components/models/batch_norm.h): torch's BatchNorm2d outside a RankStatsScope,
// the same normalisation, gradients and running statistics inside one.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "components/models/batch_norm.h"
#include "components/models/threads.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include "tests/components/models/model_fixtures.h"
#include "tests/support/threads.h"

using namespace engine;
using test::max_diff;
using test::same_bits;

namespace {

// Real-looking activations: a conv of MNIST-like inputs has a non-zero mean per channel.
torch::Tensor activations(int64_t n, int64_t c, int64_t hw, uint64_t seed) {
  torch::manual_seed(seed);
  return (torch::randn({n, c, hw, hw}) * 1.5 + 3.0).contiguous(torch::MemoryFormat::ChannelsLast);
}

}  // namespace

TEST_CASE("SyncBatchNorm2d: one rank's global statistics equal torch's BatchNorm2d, values and gradients") {
  // One intra-op thread, LibTorch 1.13's start-up count: 2.x starts with every core, and its batch_norm's
  // bits follow how the work is split (2.6 on an AVX2 Zen 3). The 2-thread contract has its own test below.
  const engine::test::IntraOpThreads one_thread(1);
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

namespace {

// torch's unfused ops through autograd: batch_norm, the residual sum, relu.
struct Unfused {
  torch::Tensor y, dx, dw, db, dres, running_mean, running_var;
};

Unfused unfused(const torch::Tensor& x0, const torch::Tensor& res0, const torch::Tensor& dy, const torch::Tensor& w0,
                const torch::Tensor& b0) {
  torch::Tensor x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
  torch::Tensor res = res0.defined() ? res0.clone().requires_grad_() : torch::Tensor();
  torch::Tensor rm = torch::zeros({x0.size(1)}), rv = torch::ones({x0.size(1)});
  torch::Tensor y = torch::batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5, false);
  if (res.defined()) y = y.add_(res);
  y = y.relu_();
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.grad(), res.defined() ? res.grad() : torch::Tensor(), rm, rv};
}

}  // namespace

TEST_CASE("SyncBatchNorm2d: forward_relu in training gives the bits of torch's batch_norm, residual sum and relu through autograd") {
  const engine::test::IntraOpThreads one_thread(1);  // torch's reference at 1 thread, as in the first test
  for (const int64_t hw : {2, 7}) {
    for (const bool with_residual : {false, true}) {
      CAPTURE(hw);
      CAPTURE(with_residual);
      const torch::Tensor x0 = activations(32, 16, hw, 3), dy = torch::randn_like(x0);
      const torch::Tensor res0 = with_residual ? activations(32, 16, hw, 4) - 3.0 : torch::Tensor();
      SyncBatchNorm2d bn(16);
      {
        torch::NoGradGuard g;
        bn->weight.uniform_(0.5, 1.5);
        bn->bias.uniform_(-0.5, 0.5);
      }
      const Unfused ref = unfused(x0, res0, dy, bn->weight.detach(), bn->bias.detach());
      torch::Tensor x = x0.clone().requires_grad_();
      torch::Tensor res = with_residual ? res0.clone().requires_grad_() : torch::Tensor();
      torch::Tensor y = bn->forward_relu(x, res);
      y.backward(dy);
      CHECK(same_bits(y, ref.y));
      CHECK(same_bits(x.grad(), ref.dx));
      CHECK(same_bits(bn->weight.grad(), ref.dw));
      CHECK(same_bits(bn->bias.grad(), ref.db));
      if (with_residual) CHECK(same_bits(res.grad(), ref.dres));
      CHECK(same_bits(bn->running_mean, ref.running_mean));
      CHECK(same_bits(bn->running_var, ref.running_var));
      CHECK((y.min().item<float>() == 0.0f && y.max().item<float>() > 0.0f));  // the ReLU cut something
    }
  }
}

namespace {

// forward_relu's result, gradients and running statistics; the same through torch's ops.
std::vector<torch::Tensor> fused_bn(const torch::Tensor& x0, const torch::Tensor& dy) {
  SyncBatchNorm2d bn(x0.size(1));
  torch::Tensor x = x0.clone().requires_grad_();
  torch::Tensor y = bn->forward_relu(x);
  y.backward(dy);
  return {y.detach(), x.grad(), bn->weight.grad(), bn->running_var};
}

std::vector<torch::Tensor> torch_bn(const torch::Tensor& x0, const torch::Tensor& dy) {
  const Unfused r = unfused(x0, {}, dy, torch::ones({x0.size(1)}), torch::zeros({x0.size(1)}));
  return {r.y, r.dx, r.dw, r.running_var};
}

std::vector<torch::Tensor> at_threads(int threads, const std::function<std::vector<torch::Tensor>()>& f) {
  const engine::test::IntraOpThreads scoped(threads);
  return f();
}

bool all_same_bits(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("SyncBatchNorm2d: below kSplitMinElements training runs on one thread (torch's 1-thread bits at 2 threads), from it on split") {
  // Small: resnet34's layer2 at 28x28 digits (64 x 128 x 4 x 4 = 131k elements). Large: exactly the threshold.
  for (const auto& shape : {std::vector<int64_t>{64, 128, 4, 4}, std::vector<int64_t>{64, 32, 16, 16}}) {
    const bool small = shape[0] * shape[1] * shape[2] * shape[3] < kSplitMinElements;
    CAPTURE(small);
    torch::manual_seed(5);
    const torch::Tensor x = (torch::randn(shape) * 1.5 + 3.0).contiguous(torch::MemoryFormat::ChannelsLast);
    const torch::Tensor dy = torch::randn_like(x);
    const auto torch1 = at_threads(1, [&] { return torch_bn(x, dy); });
    const auto torch2 = at_threads(2, [&] { return torch_bn(x, dy); });
    // The check can fail only if splitting changes the sums' order here.
    REQUIRE_FALSE(all_same_bits(torch1, torch2));
    int threads_after = 0;
    const auto fused2 = at_threads(2, [&] {
      auto r = fused_bn(x, dy);
      threads_after = torch::get_num_threads();  // the one-thread guard put the count back
      return r;
    });
    CHECK(all_same_bits(fused2, small ? torch1 : torch2));
    CHECK(threads_after == 2);
  }
}
