#include <doctest/doctest.h>
#include <torch/torch.h>

#include <functional>

#include "components/optimizers/adam.h"
#include "components/optimizers/adamw.h"
#include "components/optimizers/optimizer.h"
#include "components/optimizers/sgd.h"
#include "engine/core/errors.h"

using namespace engine;

namespace {

using Build = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<ParamGroup>)>;

// A tiny linear model: weight [3, 4] (decays), bias [3] (no decay), and an unused parameter that
// never gets a gradient, hence never any optimizer state.
struct Tiny {
  torch::Tensor weight, bias, unused;
  Tiny() {
    torch::manual_seed(0);
    weight = torch::randn({3, 4}).requires_grad_(true);
    bias = torch::randn({3}).requires_grad_(true);
    unused = torch::randn({2, 2}).requires_grad_(true);
  }
  Tiny(const Tiny& other)
      : weight(other.weight.detach().clone().requires_grad_(true)),
        bias(other.bias.detach().clone().requires_grad_(true)),
        unused(other.unused.detach().clone().requires_grad_(true)) {}
  std::vector<ParamGroup> groups() {
    return decay_groups({{"fc.weight", weight}, {"fc.bias", bias}, {"extra.weight", unused}});
  }
  void train_step(torch::optim::Optimizer& opt, int t) {
    torch::manual_seed(100 + t);  // the same batch for both copies at the same step
    auto x = torch::randn({5, 4});
    auto y = torch::randn({5, 3});
    opt.zero_grad();
    torch::mse_loss(torch::addmm(bias, x, weight.t()), y).backward();
    opt.step();
  }
};

void check_exact_resume(const Build& build, bool expect_step) {
  Tiny a;
  auto opt_a = build(a.groups());
  for (int t = 0; t < 3; ++t) a.train_step(*opt_a, t);

  auto saved = optimizer_state(*opt_a);
  // decay group: [fc.weight, extra.weight]; no-decay group: [fc.bias]. extra.weight never had a
  // gradient, so it has no state.
  CHECK(saved.count(expect_step ? "g0.p0.exp_avg" : "g0.p0.momentum_buffer") == 1);
  CHECK(saved.count(expect_step ? "g1.p0.exp_avg_sq" : "g1.p0.momentum_buffer") == 1);
  for (const auto& kv : saved) CHECK_MESSAGE(kv.first.rfind("g0.p1.", 0) != 0, kv.first);  // no binding: clang C++17
  if (expect_step) {
    const auto& step = saved.at("g0.p0.step");
    CHECK(step.dim() == 0);
    CHECK((step.scalar_type() == torch::kLong));
    CHECK(step.item<int64_t>() == 3);
  }

  Tiny b(a);
  auto opt_b = build(b.groups());
  load_optimizer_state(*opt_b, saved);
  a.train_step(*opt_a, 3);
  b.train_step(*opt_b, 3);
  CHECK(torch::equal(a.weight, b.weight));
  CHECK(torch::equal(a.bias, b.bias));
  CHECK(torch::equal(a.unused, b.unused));

  // Without the state, the next step differs: the test above is not vacuous.
  Tiny c(a);
  Tiny d(a);
  auto opt_c = build(c.groups());
  auto opt_d = build(d.groups());
  load_optimizer_state(*opt_c, optimizer_state(*opt_a));
  c.train_step(*opt_c, 4);
  d.train_step(*opt_d, 4);
  CHECK_FALSE(torch::equal(c.weight, d.weight));
}

}  // namespace

TEST_CASE("optimizer state round trip gives a bit-identical next step: sgd with nesterov momentum") {
  SgdOptions o;
  o.lr = 0.05;
  o.nesterov = true;
  o.weight_decay = 1e-2;
  check_exact_resume([o](std::vector<ParamGroup> g) { return make_sgd(o, std::move(g)); }, false);
}

TEST_CASE("optimizer state round trip gives a bit-identical next step: adam with amsgrad") {
  AdamOptions o;
  o.amsgrad = true;
  o.weight_decay = 1e-3;
  check_exact_resume([o](std::vector<ParamGroup> g) { return make_adam(o, std::move(g)); }, true);
}

TEST_CASE("optimizer state round trip gives a bit-identical next step: adamw") {
  AdamWOptions o;
  o.lr = 3e-3;
  check_exact_resume([o](std::vector<ParamGroup> g) { return make_adamw(o, std::move(g)); }, true);
}

TEST_CASE("optimizer state is a snapshot unless asked for the live buffers, and a bad state is refused without touching the optimizer") {
  Tiny a;
  auto opt = make_adam(AdamOptions{}, a.groups());
  a.train_step(*opt, 0);
  auto saved = optimizer_state(*opt);
  auto live = optimizer_state(*opt, StateCopy::live);  // what a synchronous checkpoint write takes
  CHECK(torch::equal(live.at("g0.p0.exp_avg"), saved.at("g0.p0.exp_avg")));
  auto before = saved.at("g0.p0.exp_avg").clone();
  a.train_step(*opt, 1);
  CHECK(torch::equal(saved.at("g0.p0.exp_avg"), before));  // a copy, not the live buffer
  CHECK_FALSE(torch::equal(live.at("g0.p0.exp_avg"), before));  // the live buffer, stepped
  CHECK(torch::equal(live.at("g0.p0.exp_avg"), optimizer_state(*opt).at("g0.p0.exp_avg")));

  auto bad_shape = saved;
  bad_shape["g0.p0.exp_avg"] = torch::zeros({4, 3});
  CHECK_THROWS_AS(load_optimizer_state(*opt, bad_shape), UserError);
  auto bad_index = saved;
  bad_index["g5.p0.exp_avg"] = torch::zeros({3});
  CHECK_THROWS_AS(load_optimizer_state(*opt, bad_index), UserError);
  auto bad_field = saved;
  bad_field["g0.p0.momentum_buffer"] = torch::zeros({3, 4});
  CHECK_THROWS_AS(load_optimizer_state(*opt, bad_field), UserError);
  auto bad_key = saved;
  bad_key["exp_avg"] = torch::zeros({3});
  CHECK_THROWS_AS(load_optimizer_state(*opt, bad_key), UserError);
  auto missing = saved;
  missing.erase("g0.p0.exp_avg_sq");
  CHECK_THROWS_AS(load_optimizer_state(*opt, missing), UserError);
  // The refused loads left the live state alone: the step count is still 2.
  CHECK(optimizer_state(*opt).at("g0.p0.step").item<int64_t>() == 2);
}
