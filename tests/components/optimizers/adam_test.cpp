#include "components/optimizers/adam.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>

#include "components/optimizers/adamw.h"
#include "components/optimizers/sgd.h"

using namespace engine;

namespace {
const std::vector<float> kP0{1.0f, -2.0f, 0.5f, 3.0f};
const std::vector<float> kGrad{0.3f, 0.1f, 2.0f, -5.0f};

torch::Tensor param() { return torch::tensor(kP0).requires_grad_(true); }
void set_grad(const torch::Tensor& p) { p.mutable_grad() = torch::tensor(kGrad); }
}  // namespace

TEST_CASE("adam: with a constant gradient, each of the first steps moves by lr * g / (|g| + eps)") {
  AdamOptions o;
  o.lr = 0.01;
  o.eps = 1e-3;  // large enough to see in float32
  auto p = param();
  auto opt = make_adam(o, {ParamGroup{"all", {p}, true, 1.0}});
  // Bias correction makes m_hat = g and v_hat = g^2 at every step while g is constant.
  for (int t = 1; t <= 3; ++t) {
    set_grad(p);
    opt->step();
    for (size_t i = 0; i < kP0.size(); ++i) {
      double g = kGrad[i];
      double expected = kP0[i] - t * o.lr * g / (std::abs(g) + o.eps);
      CHECK(p[i].item<double>() == doctest::Approx(expected).epsilon(1e-5));
    }
  }
}

TEST_CASE("adamw decays decoupled (p *= 1 - lr wd), adam adds wd p to the gradient (L2)") {
  double lr = 0.01, wd = 0.1, eps = 1e-8;
  AdamOptions a;
  a.lr = lr;
  a.eps = eps;
  a.weight_decay = wd;
  AdamWOptions w;
  w.lr = lr;
  w.eps = eps;
  w.weight_decay = wd;
  auto pa = param(), pw = param();
  auto adam = make_adam(a, {ParamGroup{"all", {pa}, true, 1.0}});
  auto adamw = make_adamw(w, {ParamGroup{"all", {pw}, true, 1.0}});
  set_grad(pa);
  set_grad(pw);
  adam->step();
  adamw->step();
  for (size_t i = 0; i < kP0.size(); ++i) {
    double p0 = kP0[i], g = kGrad[i];
    double gl2 = g + wd * p0;
    double exp_adam = p0 - lr * gl2 / (std::abs(gl2) + eps);
    double exp_adamw = p0 * (1 - lr * wd) - lr * g / (std::abs(g) + eps);
    CHECK(pa[i].item<double>() == doctest::Approx(exp_adam).epsilon(1e-6));
    CHECK(pw[i].item<double>() == doctest::Approx(exp_adamw).epsilon(1e-6));
  }
  // Element 1 shows the difference: L2 flips the gradient's sign (0.1 + 0.1 * -2 = -0.1), so adam
  // moves p up; adamw follows the raw gradient down and only shrinks |p| by lr * wd * |p|.
  CHECK(pa[1].item<double>() > -2.0);
  CHECK(pw[1].item<double>() < -2.0);
  CHECK(AdamWOptions{}.weight_decay == 0.01);
  CHECK(AdamOptions{}.weight_decay == 0.0);
}

TEST_CASE("no-decay groups are untouched by weight decay, lr_scale scales the group's lr") {
  AdamWOptions w;
  w.lr = 0.1;
  w.weight_decay = 0.5;
  auto decayed = torch::ones({2, 2}).requires_grad_(true);
  auto kept = torch::ones({2}).requires_grad_(true);
  auto opt =
      make_adamw(w, {ParamGroup{"decay", {decayed}, true, 1.0}, ParamGroup{"no_decay", {kept}, false, 0.5}});
  REQUIRE(opt->param_groups().size() == 2);
  CHECK(get_lr(*opt, 0) == doctest::Approx(0.1));
  CHECK(get_lr(*opt, 1) == doctest::Approx(0.05));
  CHECK(dynamic_cast<torch::optim::AdamWOptions&>(opt->param_groups()[1].options()).weight_decay() == 0);
  // A zero gradient makes the Adam update exactly 0: only weight decay can move a parameter.
  decayed.mutable_grad() = torch::zeros_like(decayed);
  kept.mutable_grad() = torch::zeros_like(kept);
  opt->step();
  CHECK(torch::allclose(decayed, torch::full({2, 2}, 1 - 0.1 * 0.5)));
  CHECK(torch::equal(kept, torch::ones({2})));

  // Same for L2 decay in sgd and adam.
  SgdOptions s;
  s.weight_decay = 0.5;
  auto sp = torch::ones({2}).requires_grad_(true);
  auto sgd = make_sgd(s, {ParamGroup{"no_decay", {sp}, false, 1.0}});
  sp.mutable_grad() = torch::zeros_like(sp);
  sgd->step();
  CHECK(torch::equal(sp, torch::ones({2})));
}

TEST_CASE("adam: set_momentum sets beta1 and changes the next step") {
  AdamOptions o;
  o.lr = 0.01;
  auto p = param(), q = param();
  auto a = make_adam(o, {ParamGroup{"all", {p}, true, 1.0}});
  auto b = make_adam(o, {ParamGroup{"all", {q}, true, 1.0}});
  set_grad(p);
  set_grad(q);
  a->step();
  b->step();
  REQUIRE(torch::equal(p, q));
  set_momentum(*b, 0.5);
  CHECK(std::get<0>(dynamic_cast<torch::optim::AdamOptions&>(b->param_groups()[0].options()).betas()) == 0.5);
  p.mutable_grad() = -torch::tensor(kGrad);  // a gradient flip makes beta1 visible
  q.mutable_grad() = -torch::tensor(kGrad);
  a->step();
  b->step();
  CHECK_FALSE(torch::equal(p, q));
}
