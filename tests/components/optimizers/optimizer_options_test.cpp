#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fstream>

#include "components/optimizers/all.h"
#include "components/optimizers/optimizer.h"
#include "engine/recipe/options.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {

struct Parsed {
  std::unique_ptr<RecipeDocument> doc;
  OptimizerRegistry::Factory factory;
};

Parsed parse_optimizer(const std::string& tag, const std::string& table_body) {
  std::string file = test::temp_dir(tag) + "/r.toml";
  std::ofstream(file) << "[optimizer]\n" << table_body;
  Parsed r;
  r.doc = std::make_unique<RecipeDocument>(file, std::vector<std::string>{});
  OptimizerRegistry registry("optimizer");
  register_optimizers(registry);
  Options root = r.doc->root();
  Options t = root.table("optimizer", "");
  r.factory = registry.parse(t);
  r.doc->finish();
  return r;
}

bool has_line(const Diagnostics& d, const std::string& needle) {
  for (const auto& l : d.lines())
    if (l.find(needle) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("decay_groups: >= 2-D weights decay, biases, norms, gamma and 1-D params do not") {
  auto w4 = torch::zeros({2, 1, 3, 3}), w2 = torch::zeros({4, 2}), v = torch::zeros({4});
  auto groups = decay_groups({{"stem.0.weight", w4},
                              {"stem.0.bias", v},
                              {"stages.0.blocks.0.norm.weight", v},
                              {"stages.0.blocks.0.gamma", v},
                              {"head.fc.weight", w2},
                              {"head.fc.bias", w2},          // 2-D, but a bias by name
                              {"stages.1.norm.weight", w2},  // 2-D, but a norm by name
                              {"bn1.weight", w2}});
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].name == "decay");
  CHECK(groups[0].decay);
  CHECK(groups[0].params.size() == 2);
  CHECK(groups[1].name == "no_decay");
  CHECK_FALSE(groups[1].decay);
  CHECK(groups[1].params.size() == 6);
  CHECK(groups[0].params[0].is_same(w4));
  CHECK(groups[0].params[1].is_same(w2));
  // Both groups always exist, so group indices do not depend on the model.
  CHECK(decay_groups({{"fc.weight", w2}}).size() == 2);
}

TEST_CASE("the optimizer registry parses each optimizer, fills defaults and builds it") {
  OptimizerRegistry registry("optimizer");
  register_optimizers(registry);
  CHECK(registry.names() == std::vector<std::string>{"adam", "adamw", "sgd"});
  auto p = parse_optimizer("optim_ok", "name = \"adamw\"\nlr = 2e-3\nbetas = [0.9, 0.99]\n");
  REQUIRE(p.doc->diagnostics().ok());
  REQUIRE(p.factory);
  std::string resolved = p.doc->resolved_toml();
  CHECK(resolved.find("weight_decay = 0.01") != std::string::npos);
  CHECK(resolved.find("amsgrad = false") != std::string::npos);
  auto w = torch::zeros({2, 2}).requires_grad_(true);
  auto opt = p.factory({ParamGroup{"decay", {w}, true, 1.0}});
  auto& o = dynamic_cast<torch::optim::AdamWOptions&>(opt->param_groups()[0].options());
  CHECK(o.lr() == 2e-3);
  CHECK(std::get<1>(o.betas()) == 0.99);
  CHECK(o.weight_decay() == 0.01);

  auto s = parse_optimizer("optim_sgd", "name = \"sgd\"\n");
  REQUIRE(s.doc->diagnostics().ok());
  auto sgd = s.factory({ParamGroup{"decay", {w}, true, 1.0}});
  auto& so = dynamic_cast<torch::optim::SGDOptions&>(sgd->param_groups()[0].options());
  CHECK(so.lr() == 0.1);
  CHECK(so.momentum() == 0.9);
  CHECK_FALSE(so.nesterov());
  CHECK(registry.describe("adam").size() == 5);  // lr, betas, eps, weight_decay, amsgrad
}

TEST_CASE("bad optimizer values are recipe errors with positions") {
  auto p = parse_optimizer("optim_bad",
                           "name = \"adam\"\nlr = -1\nbetas = [0.9, 1.0]\neps = 0\nweight_decay = -0.1\n");
  const auto& d = p.doc->diagnostics();
  CHECK(d.lines().size() == 4);
  CHECK(has_line(d, "r.toml:3:6: optimizer.lr: value -1 is out of range, expected > 0"));
  CHECK(has_line(d, ":4:9: optimizer.betas: value 1 is out of range"));
  CHECK(has_line(d, ":5:7: optimizer.eps:"));
  CHECK(has_line(d, ":6:16: optimizer.weight_decay:"));

  auto q = parse_optimizer("optim_bad2", "name = \"sgd\"\nmomentum = 0\nnesterov = true\nbetas = [0.9]\n");
  CHECK(q.doc->diagnostics().lines().size() == 2);
  CHECK(has_line(q.doc->diagnostics(), "optimizer.nesterov: nesterov = true needs momentum > 0"));
  CHECK(has_line(q.doc->diagnostics(), "optimizer.betas: unknown key"));  // sgd has no betas

  auto r = parse_optimizer("optim_bad3", "name = \"adamw\"\nbetas = [0.9]\nmomentum = 1.5\n");
  CHECK(has_line(r.doc->diagnostics(), "optimizer.betas: expected 2 values, got 1"));
  CHECK(has_line(r.doc->diagnostics(), "optimizer.momentum: unknown key"));
}
