// FlatAdamW (the engine's adamw) must train as torch::optim::AdamW: the same parameters after
// every step up to float rounding (its fused CPU kernel contracts FMAs where torch's ops do not),
// the same checkpointable state; and it must leave parameters and gradients in one flat
// buffer, which the DDP all-reduce and the gradient zeroing rely on.
#include "components/optimizers/flat_adamw.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>

#include "components/optimizers/adamw.h"
#include "components/optimizers/optimizer.h"
#include "tests/components/models/mnist_batch.h"

using namespace engine;

namespace {

// A small conv net on real digits: a channels-last conv weight (4-d, decays), biases and a norm
// weight (no decay), a linear head. `extra` is a parameter the forward may leave unused.
struct Net {
  torch::Tensor conv_w, conv_b, norm_w, fc_w, fc_b, extra;
  Net() {
    torch::manual_seed(0);
    conv_w = (torch::randn({8, 1, 3, 3}) * 0.3).contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_();
    conv_b = torch::zeros({8}).requires_grad_();
    norm_w = torch::ones({8}).requires_grad_();
    fc_w = (torch::randn({10, 8}) * 0.3).requires_grad_();
    fc_b = torch::zeros({10}).requires_grad_();
    extra = torch::randn({4, 4}).requires_grad_();
  }
  Net(const Net& o)
      : conv_w(o.conv_w.detach().clone().requires_grad_()), conv_b(o.conv_b.detach().clone().requires_grad_()),
        norm_w(o.norm_w.detach().clone().requires_grad_()), fc_w(o.fc_w.detach().clone().requires_grad_()),
        fc_b(o.fc_b.detach().clone().requires_grad_()), extra(o.extra.detach().clone().requires_grad_()) {}
  std::vector<std::pair<std::string, torch::Tensor>> named() const {
    return {{"conv.weight", conv_w}, {"conv.bias", conv_b}, {"norm.weight", norm_w},
            {"fc.weight", fc_w},     {"fc.bias", fc_b},     {"extra.weight", extra}};
  }
  std::vector<torch::Tensor> all() const { return {conv_w, conv_b, norm_w, fc_w, fc_b, extra}; }
  torch::Tensor loss(const test::MnistBatch& b, bool use_extra) const {
    auto h = torch::conv2d(b.images, conv_w, conv_b, 2).relu().mean({2, 3}) * norm_w;
    auto logits = torch::addmm(fc_b, h, fc_w.t());
    if (use_extra) logits = logits + extra.sum() * 1e-3;
    return torch::nn::functional::cross_entropy(logits, b.labels);
  }
};

std::unique_ptr<torch::optim::Optimizer> adamw(const Net& n, bool flat) {
  torch::optim::AdamWOptions o(0.01);
  o.weight_decay(0.05);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (auto& g : decay_groups(n.named())) {
    auto go = std::make_unique<torch::optim::AdamWOptions>(o);
    if (!g.decay) go->weight_decay(0.0);
    groups.emplace_back(g.params, std::move(go));
  }
  if (flat) return std::make_unique<FlatAdamW>(std::move(groups), o);
  return std::make_unique<torch::optim::AdamW>(std::move(groups), o);
}

void train_step(const Net& n, torch::optim::Optimizer& opt, const test::MnistBatch& b, int t, bool use_extra) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(0.01 / (1 + t));
  for (auto& p : n.all())
    if (p.grad().defined()) p.mutable_grad().zero_();
  n.loss(b, use_extra).backward();
  opt.step();
}

double max_diff(const Net& a, const Net& b) {
  double d = 0;
  auto pa = a.all(), pb = b.all();
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, (pa[i] - pb[i]).abs().max().item<double>());
  return d;
}

}  // namespace

TEST_CASE("FlatAdamW trains as torch::optim::AdamW, flat when every parameter has a gradient") {
  const auto digits = test::mnist_batch(32, 28);
  for (bool use_extra : {true, false}) {
    CAPTURE(use_extra);
    Net ref, flat(ref);
    auto opt_ref = adamw(ref, false), opt_flat = adamw(flat, true);
    auto& f = static_cast<FlatAdamW&>(*opt_flat);
    for (int t = 0; t < 6; ++t) {
      train_step(ref, *opt_ref, digits, t, use_extra);
      train_step(flat, *opt_flat, digits, t, use_extra);
      // Without `extra` in the loss it never gets a gradient: torch skips it, and so must we
      // (through torch's own update: the flat one needs every gradient).
      CHECK(f.flat_groups_last_step() == (use_extra ? 2 : 0));
      // Step 1 from equal inputs: a few ulps (parameters are O(1)). Later steps see gradients of
      // slightly different weights, so the gap grows as with any change of kernel, yet stays tiny
      // next to the update itself (lr 0.01 per step).
      CHECK(max_diff(ref, flat) <= (t == 0 ? 5e-7 : 1e-4));
    }
    CHECK(max_diff(ref, Net()) > 1e-3);  // it trained: the comparison above is not vacuous
    CHECK(torch::equal(flat.extra, Net().extra) == !use_extra);
  }
}

TEST_CASE("after a FlatAdamW step, parameters and gradients are views of one buffer, in group order") {
  const auto digits = test::mnist_batch(16, 28);
  Net n;
  auto opt = adamw(n, true);
  train_step(n, *opt, digits, 0, true);
  const char* next_p = nullptr;
  const char* next_g = nullptr;
  for (auto& g : opt->param_groups())
    for (auto& p : g.params()) {
      const char* dp = static_cast<const char*>(p.data_ptr());
      const char* dg = static_cast<const char*>(p.grad().data_ptr());
      if (next_p) CHECK(dp == next_p);
      if (next_g) CHECK(dg == next_g);
      next_p = dp + p.numel() * p.element_size();
      next_g = dg + p.numel() * p.element_size();
      CHECK(p.strides() == p.grad().strides());  // channels-last weight keeps its layout
    }
  CHECK(n.conv_w.is_contiguous(torch::MemoryFormat::ChannelsLast));
  // Gradients keep accumulating in place in the next backward.
  const void* before = n.fc_w.grad().data_ptr();
  train_step(n, *opt, digits, 1, true);
  CHECK(n.fc_w.grad().data_ptr() == before);
}

TEST_CASE("FlatAdamW state saves and loads like torch's, and a replaced gradient or parameter is adopted") {
  const auto digits = test::mnist_batch(32, 28);
  Net a;
  auto opt_a = adamw(a, true);
  for (int t = 0; t < 3; ++t) train_step(a, *opt_a, digits, t, true);
  auto saved = optimizer_state(*opt_a);
  CHECK(saved.at("g0.p0.step").item<int64_t>() == 3);

  Net b(a);
  auto opt_b = adamw(b, true);
  load_optimizer_state(*opt_b, saved);
  for (int t = 3; t < 6; ++t) {
    train_step(a, *opt_a, digits, t, true);
    train_step(b, *opt_b, digits, t, true);
  }
  CHECK(max_diff(a, b) == 0);
  CHECK(static_cast<FlatAdamW&>(*opt_b).flat_groups_last_step() == 2);

  // A gradient reset to undefined (autograd then allocates a new one) and a parameter given new
  // data from outside: the next step uses both, then puts them back in the arena.
  Net c(a);
  torch::Tensor fresh = a.fc_w.detach().clone() * 0.5;
  a.fc_w.mutable_grad() = torch::Tensor();
  c.fc_w.mutable_grad() = torch::Tensor();
  { torch::NoGradGuard g; a.fc_w.set_data(fresh.clone()); }
  auto opt_c = adamw(c, false);
  load_optimizer_state(*opt_c, optimizer_state(*opt_a));
  { torch::NoGradGuard g; c.fc_w.set_data(fresh.clone()); }
  train_step(a, *opt_a, digits, 6, true);
  train_step(c, *opt_c, digits, 6, true);
  CHECK(max_diff(a, c) <= 5e-7);  // one step from equal inputs
  CHECK(static_cast<FlatAdamW&>(*opt_a).flat_groups_last_step() == 2);
}

TEST_CASE("the DDP step split over 2 ranks: the parameters and moments of all-reduce + step, to the bit") {
  // Two replicas stand in for two ranks (their buffers in one process, as shared memory shows them
  // to a DDP job's ranks), each with the gradients of its own half of the batch; the reference
  // steps on the mean of both, computed as the shared-memory all-reduce does: (g0 + g1) * 0.5.
  const auto half0 = test::mnist_batch(16, 28), half1 = test::mnist_batch(16, 28, 1, 16);
  Net ref, r0(ref), r1(ref);
  auto opt_ref = adamw(ref, true), opt0 = adamw(r0, true), opt1 = adamw(r1, true);
  auto& f0 = static_cast<FlatAdamW&>(*opt0);
  auto& f1 = static_cast<FlatAdamW&>(*opt1);
  auto grads_of = [](const Net& n, const test::MnistBatch& b) {
    for (auto& p : n.all())
      if (p.grad().defined()) p.mutable_grad().zero_();
    n.loss(b, true).backward();
    std::vector<torch::Tensor> g;
    for (auto& p : n.all()) g.push_back(p.grad().clone());
    return g;
  };
  auto set_lr = [](torch::optim::Optimizer& o, int t) {
    for (auto& g : o.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(0.01 / (1 + t));
  };
  std::vector<int64_t> edges;
  for (int t = 0; t < 5; ++t) {
    CAPTURE(t);
    for (auto* o : {opt_ref.get(), opt0.get(), opt1.get()}) set_lr(*o, t);
    auto g0 = grads_of(ref, half0), g1 = grads_of(ref, half1);
    auto params = ref.all();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad().copy_((g0[i] + g1[i]) * 0.5f);
    opt_ref->step();

    grads_of(r0, half0);
    grads_of(r1, half1);
    std::vector<torch::Tensor> b0, b1;
    REQUIRE(f0.begin_shared_step(b0));
    REQUIRE(f1.begin_shared_step(b1));
    REQUIRE(b0.size() == 4);
    std::vector<std::vector<float*>> peers;
    for (size_t k = 0; k < 4; ++k) peers.push_back({b0[k].data_ptr<float>(), b1[k].data_ptr<float>()});
    const int64_t n = b0[0].numel();
    edges = {0, n / 2 / 16 * 16, n};  // 194 elements: 96 / 98, across the group boundary at 168
    f0.step_shared(edges, peers, 0);  // rank 0 writes share 0 of both ranks' parameters
    f1.step_shared(edges, peers, 1);
    CHECK(f0.flat_groups_last_step() == 2);
    CHECK(max_diff(ref, r0) == 0);
    CHECK(max_diff(ref, r1) == 0);
  }
  CHECK(max_diff(ref, Net()) > 1e-3);  // it trained
  // Each rank's moments are current in its own share only, until gathered.
  auto ref_state = optimizer_state(*opt_ref);
  auto differs = [&](torch::optim::Optimizer& o) {
    for (auto& [k, v] : optimizer_state(o))
      if (!torch::equal(v, ref_state.at(k))) return true;
    return false;
  };
  CHECK(differs(*opt0));
  CHECK(differs(*opt1));
  f0.gather_shares();
  f1.gather_shares();
  CHECK_FALSE(differs(*opt0));
  CHECK_FALSE(differs(*opt1));

  // A plain step after split ones (a recipe that clips, a frozen stage) gathers by itself first.
  Net r2(ref);
  auto opt2 = adamw(r2, true);
  load_optimizer_state(*opt2, ref_state);
  for (int t = 5; t < 7; ++t) {
    for (auto* o : {opt_ref.get(), opt0.get(), opt1.get(), opt2.get()}) set_lr(*o, t);
    auto g = grads_of(ref, half0);
    opt_ref->step();
    if (t == 5) {  // one more split step of rank 0 alone (its peer's share written by "rank 1")
      grads_of(r0, half0);
      grads_of(r1, half0);
      std::vector<torch::Tensor> b0, b1;
      REQUIRE(f0.begin_shared_step(b0));
      REQUIRE(f1.begin_shared_step(b1));
      std::vector<std::vector<float*>> peers;
      for (size_t k = 0; k < 4; ++k) peers.push_back({b0[k].data_ptr<float>(), b1[k].data_ptr<float>()});
      f0.step_shared(edges, peers, 0);
      f1.step_shared(edges, peers, 1);
    } else {
      grads_of(r0, half0);
      opt0->step();
    }
    grads_of(r2, half0);
    opt2->step();
    CHECK(max_diff(ref, r0) == 0);
    CHECK(max_diff(ref, r2) == 0);
  }
  auto now = optimizer_state(*opt_ref);
  for (auto& [k, v] : optimizer_state(*opt0)) CHECK(torch::equal(v, now.at(k)));
}
