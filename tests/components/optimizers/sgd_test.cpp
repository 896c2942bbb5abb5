#include "components/optimizers/sgd.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <vector>

using namespace engine;

namespace {

// loss = sum(c * p^2), so grad = 2 c p: the gradient depends on the parameter, as in training.
void backward_step(torch::optim::Optimizer& opt, const torch::Tensor& p, const torch::Tensor& c) {
  opt.zero_grad();
  (c * p * p).sum().backward();
  opt.step();
}

// The documented rule, element by element, in double: an independent hand computation.
std::vector<double> reference_sgd(std::vector<double> p, const std::vector<double>& c, const SgdOptions& o,
                                  int steps) {
  std::vector<double> buf(p.size());
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < p.size(); ++i) {
      double g = 2 * c[i] * p[i] + o.weight_decay * p[i];
      buf[i] = t == 0 ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
      double d = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      p[i] -= o.lr * d;
    }
  }
  return p;
}

void check_three_steps(const SgdOptions& o) {
  std::vector<double> p0{1.0, -2.0, 0.5}, c{1.0, 0.5, 3.0};
  auto p = torch::tensor({1.0f, -2.0f, 0.5f}).requires_grad_(true);
  auto ct = torch::tensor({1.0f, 0.5f, 3.0f});
  auto opt = make_sgd(o, {ParamGroup{"all", {p}, true, 1.0}});
  for (int t = 0; t < 3; ++t) backward_step(*opt, p, ct);
  auto expected = reference_sgd(p0, c, o, 3);
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK(p[i].item<double>() == doctest::Approx(expected[i]).epsilon(1e-5));
}

}  // namespace

TEST_CASE("sgd: 3 steps with momentum, nesterov and L2 weight decay match the hand computation") {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.1;
  check_three_steps(o);
}

TEST_CASE("sgd: 3 steps with heavy-ball momentum and dampening match the hand computation") {
  SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.8;
  o.dampening = 0.1;
  o.weight_decay = 0.01;
  check_three_steps(o);
}

TEST_CASE("sgd: the first step by hand: p - lr * (2cp + wd p), nesterov adds momentum * g") {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.nesterov = true;
  o.weight_decay = 0.1;
  auto p = torch::tensor({1.0f}).requires_grad_(true);
  auto opt = make_sgd(o, {ParamGroup{"all", {p}, true, 1.0}});
  backward_step(*opt, p, torch::tensor({1.0f}));
  // g = 2 + 0.1 = 2.1; buf = g; d = g + 0.9 g = 3.99; p = 1 - 0.399
  CHECK(p.item<double>() == doctest::Approx(0.601).epsilon(1e-6));
}

TEST_CASE("sgd: set_lr and set_momentum change the next step, plain SGD keeps momentum 0") {
  SgdOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  auto p = torch::tensor({1.0f}).requires_grad_(true);
  auto opt = make_sgd(o, {ParamGroup{"all", {p}, true, 1.0}});
  auto g = torch::tensor({1.0f});
  p.mutable_grad() = g.clone();
  opt->step();  // buf = 1, p = 1 - 0.1 = 0.9
  CHECK(p.item<double>() == doctest::Approx(0.9));
  set_lr(*opt, 0, 0.01);
  set_momentum(*opt, 0.5);
  CHECK(get_lr(*opt, 0) == 0.01);
  p.mutable_grad() = g.clone();
  opt->step();  // buf = 0.5 * 1 + 1 = 1.5, p = 0.9 - 0.015
  CHECK(p.item<double>() == doctest::Approx(0.885).epsilon(1e-6));

  SgdOptions plain;
  plain.momentum = 0;
  auto q = torch::tensor({1.0f}).requires_grad_(true);
  auto opt2 = make_sgd(plain, {ParamGroup{"all", {q}, true, 1.0}});
  set_momentum(*opt2, 0.95);
  CHECK(dynamic_cast<torch::optim::SGDOptions&>(opt2->param_groups()[0].options()).momentum() == 0);
  CHECK_THROWS_AS(set_momentum(*opt2, 1.5), std::invalid_argument);
  CHECK_THROWS_AS(get_lr(*opt2, 3), std::out_of_range);
}
