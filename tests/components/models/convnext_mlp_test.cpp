// The fused ConvNeXt block tail (convnext_mlp.h) against the ops it replaces: addmm, exact GELU,
// addmm, layer scale, drop_path and the residual add, composed by torch's autograd.
#include "components/models/convnext_mlp.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "components/models/convnext.h"
#include "components/models/layers.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/threads.h"

namespace {

using engine::test::rel_diff;

struct Tail {
  torch::Tensor x, t, w1, b1, w2, b2, gamma;
  std::vector<torch::Tensor> all() const { return {x, t, w1, b1, w2, b2, gamma}; }
};

// Inputs of one block tail: N images of H x W with C channels, channels-last, with gradients.
Tail make_tail(int64_t n, int64_t c, int64_t hw, bool conv_weights) {
  torch::manual_seed(11);
  auto cl = [](torch::Tensor v) { return v.contiguous(torch::MemoryFormat::ChannelsLast).requires_grad_(); };
  Tail p;
  p.x = cl(torch::randn({n, c, hw, hw}));
  p.t = cl(torch::randn({n, c, hw, hw}));
  const auto w1s = conv_weights ? std::vector<int64_t>{4 * c, c, 1, 1} : std::vector<int64_t>{4 * c, c};
  const auto w2s = conv_weights ? std::vector<int64_t>{c, 4 * c, 1, 1} : std::vector<int64_t>{c, 4 * c};
  p.w1 = (torch::randn(w1s) * 0.2).requires_grad_();
  p.b1 = (torch::randn({4 * c}) * 0.1).requires_grad_();
  p.w2 = (torch::randn(w2s) * 0.2).requires_grad_();
  p.b2 = (torch::randn({c}) * 0.1).requires_grad_();
  p.gamma = (torch::rand({c}) + 0.5).requires_grad_();
  return p;
}

// The composed ops, as convnext.cpp runs them without the fused path.
torch::Tensor composed(const Tail& p, double drop, bool training) {
  auto m2 = [](const torch::Tensor& w) { return w.view({w.size(0), w.size(1)}); };
  const int64_t n = p.t.size(0), h = p.t.size(2), w = p.t.size(3);
  torch::Tensor rows = p.t.permute({0, 2, 3, 1}).reshape({n * h * w, p.t.size(1)});
  torch::Tensor y = torch::addmm(p.b2, torch::gelu(torch::addmm(p.b1, rows, m2(p.w1).t())), m2(p.w2).t());
  y = y.view({n, h, w, y.size(1)}).permute({0, 3, 1, 2}) * p.gamma.view({1, -1, 1, 1});
  return engine::drop_path(y, drop, training) + p.x;
}

// Output and the gradients of sum(out * probe) for every input, from `fn` after seeding the generator.
std::vector<torch::Tensor> run(const Tail& p, const torch::Tensor& probe, uint64_t seed,
                               const std::function<torch::Tensor()>& fn) {
  for (const auto& v : p.all()) v.mutable_grad() = torch::Tensor();
  torch::manual_seed(seed);
  torch::Tensor out = fn();
  REQUIRE(out.defined());
  (out * probe).sum().backward();
  std::vector<torch::Tensor> r{out.detach()};
  for (const auto& v : p.all()) r.push_back(v.grad().clone());
  return r;
}

}  // namespace

TEST_CASE(
    "fused ConvNeXt MLP tail: output and every gradient as the composed ops, the same drop-path draws") {
  const char* names[] = {"out", "x", "t", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "gamma"};
  // C = 10: channel counts off the 8- and 16-lane widths (the kernels' tails); C = 40: convnext_atto's stage
  // 0.
  for (int64_t c : {10, 40}) {
    for (bool conv : {false, true}) {
      const Tail p = make_tail(6, c, 5, conv);
      const torch::Tensor probe = torch::randn({6, c, 5, 5});
      for (double drop : {0.0, 0.5}) {
        CAPTURE(c);
        CAPTURE(conv);
        CAPTURE(drop);
        auto fused = run(p, probe, 5, [&] {
          return engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, drop, true);
        });
        auto ref = run(p, probe, 5, [&] { return composed(p, drop, true); });
        CHECK(fused[0].is_contiguous(torch::MemoryFormat::ChannelsLast));
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO(names[i]);
          CHECK(fused[i].sizes() == ref[i].sizes());
          CHECK(rel_diff(fused[i], ref[i]) < 1e-5);
        }
        if (drop > 0) {  // some samples dropped (then their x gradient alone survives), the same ones
          torch::manual_seed(5);
          torch::Tensor mask = engine::drop_path_scale(p.x, drop, true).view({-1});
          CHECK(mask.eq(0).any().item<bool>());
          CHECK(mask.ne(0).any().item<bool>());
        }
      }
      // Evaluation (no gradients recorded): the same output, no drop path; and where the packed
      // kernels run (150 rows here), the blocked inference forward gives the recorded forward's bits.
      const torch::Tensor recorded =
          engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.5, false).detach();
      torch::NoGradGuard no_grad;
      torch::Tensor eval =
          engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.5, false);
      CHECK(rel_diff(eval, composed(p, 0.5, false)) < 1e-5);
      CHECK(torch::equal(eval, recorded));
    }
  }
}

TEST_CASE("fused ConvNeXt MLP tail: where it does not apply it returns nothing and draws nothing") {
  const Tail p = make_tail(4, 16, 3, false);
  auto next_draw = [](uint64_t seed, const std::function<void()>& between) {
    torch::manual_seed(seed);
    between();
    return torch::rand({1}).item<float>();
  };
  auto call = [&](const torch::Tensor& x, const torch::Tensor& t) {
    return engine::convnext_mlp_residual(x, t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.5, true);
  };
  const float untouched = next_draw(3, [] {});
  // NCHW-contiguous activations (a model without channels_last).
  const torch::Tensor x = p.x.detach().contiguous(), t = p.t.detach().contiguous();
  CHECK(next_draw(3, [&] { CHECK(!call(x, t).defined()); }) == untouched);
  // bf16 activations (autocast's domain).
  CHECK(next_draw(3, [&] { CHECK(!call(p.x.to(torch::kBFloat16), p.t.to(torch::kBFloat16)).defined()); }) ==
        untouched);
  // ENGINE_FUSED_MLP=0: the composed ops, to compare (README).
  setenv("ENGINE_FUSED_MLP", "0", 1);
  CHECK(next_draw(3, [&] { CHECK(!call(p.x, p.t).defined()); }) == untouched);
  unsetenv("ENGINE_FUSED_MLP");
  CHECK(next_draw(3, [&] { CHECK(call(p.x, p.t).defined()); }) != untouched);  // applies: one draw per sample
}

TEST_CASE("convnext_atto on real digits: fused and composed block tails train to the same gradients") {
  engine::BackboneOptions o = engine::test::opts(1, 10);
  o.drop_path_rate = 0.3;
  torch::manual_seed(4);
  auto m = engine::make_convnext("convnext_atto", o);
  {
    torch::NoGradGuard no_grad;  // layer scales as a trained model has them, not timm's 1e-6
    for (auto& p : m->named_parameters())
      if (p.key().find("gamma") != std::string::npos) p.value().fill_(0.5);
  }
  m->train();
  const auto batch = engine::test::mnist_batch(32, 40);
  auto gradients = [&](const char* fused) {
    setenv("ENGINE_FUSED_MLP", fused, 1);
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    torch::manual_seed(9);  // the same drop-path draws on both paths
    torch::Tensor logits = m->forward(batch.images);
    torch::nn::functional::cross_entropy(logits, batch.labels).backward();
    unsetenv("ENGINE_FUSED_MLP");
    std::map<std::string, torch::Tensor> g{{"logits", logits.detach()}};
    for (const auto& p : m->named_parameters()) g[p.key()] = p.value().grad().clone();
    return g;
  };
  const auto fused = gradients("1"), ref = gradients("0");
  double worst = 0;
  std::string worst_key;
  for (const auto& [k, r] : ref) {
    const double d = rel_diff(fused.at(k), r);
    if (d > worst) worst = d, worst_key = k;
  }
  MESSAGE("largest relative difference, fused vs composed: " << worst << " (" << worst_key << ")");
  CHECK(worst < 1e-4);
}

TEST_CASE("fused ConvNeXt MLP tail: the same bits with 1 and 2 threads (fixed partial sums)") {
  // 6 x 12 x 12 = 864 rows: four chunks of the kernels' row split, shared out differently by 2 threads.
  const Tail p = make_tail(6, 40, 12, false);
  const torch::Tensor probe = torch::randn({6, 40, 12, 12});
  auto fused = [&] {
    return engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.2, true);
  };
  const engine::test::IntraOpThreads threads(1);
  const auto one = run(p, probe, 5, fused);
  threads.set(2);
  const auto two = run(p, probe, 5, fused);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO(i);
    CHECK(torch::equal(one[i], two[i]));
  }
}

TEST_CASE("fused ConvNeXt MLP tail: row blocks give the bits of the whole-matrix products") {
  // 6 x 12 x 12 = 864 rows: 9 blocks of 96 rows forward, 4 chunks of 256 backward (the last ones
  // short); C = 10 and 40 off the 16-lane widths. ENGINE_BLOCKED_MLP is read on each call. On one
  // thread the whole backward runs chunk by chunk (tail, products and weight gradients); the test of
  // 1 vs 2 threads above compares it with the products over all rows as well.
  const engine::test::IntraOpThreads one_thread(1);
  for (int64_t c : {10, 40}) {
    CAPTURE(c);
    const Tail p = make_tail(6, c, 12, false);
    const torch::Tensor probe = torch::randn({6, c, 12, 12});
    auto fused = [&] {
      return engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.2, true);
    };
    const auto blocked = run(p, probe, 5, fused);
    setenv("ENGINE_BLOCKED_MLP", "0", 1);
    const auto whole = run(p, probe, 5, fused);
    unsetenv("ENGINE_BLOCKED_MLP");
    for (size_t i = 0; i < blocked.size(); ++i) {
      INFO(i);
      CHECK(torch::equal(blocked[i], whole[i]));
    }
  }
}

TEST_CASE("fused ConvNeXt MLP tail: frozen inputs get no gradient, the others the whole-matrix bits") {
  // The chunked backward (one thread) computes only what autograd asks for: a frozen MLP (fine-tuning
  // a head) still passes the input gradient through; a frozen input (the first block after a frozen
  // stem) still trains the weights.
  const engine::test::IntraOpThreads one_thread(1);
  for (int frozen : {0, 1}) {
    CAPTURE(frozen);
    Tail p = make_tail(6, 40, 12, false);
    std::vector<torch::Tensor> off = frozen == 0 ? std::vector<torch::Tensor>{p.w1, p.b1, p.w2, p.b2, p.gamma}
                                                 : std::vector<torch::Tensor>{p.t};
    for (auto& v : off) v.requires_grad_(false);
    const torch::Tensor probe = torch::randn({6, 40, 12, 12});
    auto grads = [&] {
      for (const auto& v : p.all()) v.mutable_grad() = torch::Tensor();
      torch::manual_seed(5);
      (engine::convnext_mlp_residual(p.x, p.t, p.w1, p.b1, p.w2, p.b2, p.gamma, 0.2, true) * probe).sum().backward();
      std::vector<torch::Tensor> r;
      for (const auto& v : p.all()) r.push_back(v.grad().defined() ? v.grad().clone() : torch::Tensor());
      return r;
    };
    const auto chunked = grads();
    setenv("ENGINE_BLOCKED_MLP", "0", 1);
    const auto whole = grads();
    unsetenv("ENGINE_BLOCKED_MLP");
    for (size_t i = 0; i < chunked.size(); ++i) {
      INFO(i);
      const bool trains = p.all()[i].requires_grad();
      CHECK(chunked[i].defined() == trains);
      if (trains) CHECK(torch::equal(chunked[i], whole[i]));
    }
  }
}
