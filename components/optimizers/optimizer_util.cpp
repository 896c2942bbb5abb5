// Option readers shared by the optimizers, plus decay_groups / get_lr / set_lr / set_momentum.
#include "components/optimizers/optimizer_util.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <sstream>
#include <stdexcept>
#include <tuple>

namespace engine {

namespace optim_detail {


double read_lr(Options& o, double def) {
  // Read without bounds and check here: Options::number only knows closed intervals, and "> 0"
  // reads better in the message than "[2.2e-308, inf]".
  double lr = o.number("lr", def, "base learning rate (> 0); the scheduler scales it per step");
  if (!(lr > 0)) {
    o.error("lr", "value " + format_number(lr) + " is out of range, expected > 0",
            "typical: 1e-3 for adam(w), 0.1 for sgd");
    return def;
  }
  return lr;
}

double read_weight_decay(Options& o, double def, std::string_view doc) {
  return o.number("weight_decay", def, doc, 0.0);
}

std::array<double, 2> read_betas(Options& o, const std::array<double, 2>& def) {
  std::vector<double> b = o.numbers("betas", {def[0], def[1]},
                                    "[beta1, beta2]: decay rates of the moment estimates, each in [0, 1)");
  if (b.size() != 2) {
    o.error("betas", "expected 2 values, got " + std::to_string(b.size()), "e.g. betas = [0.9, 0.999]");
    return def;
  }
  for (double v : b) {
    if (!(v >= 0 && v < 1)) {
      o.error("betas", "value " + format_number(v) + " is out of range, expected each in [0, 1)",
              "e.g. betas = [0.9, 0.999]");
      return def;
    }
  }
  return {b[0], b[1]};
}

double read_eps(Options& o, double def) {
  double eps = o.number("eps", def, "term added to the denominator for numerical stability (> 0)");
  if (!(eps > 0)) {
    o.error("eps", "value " + format_number(eps) + " is out of range, expected > 0", "typical: 1e-8");
    return def;
  }
  return eps;
}

}  // namespace optim_detail

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Name-based rules catch what the shape rule would miss if a model ever stores a norm scale or a
// layer-scale gamma with an extra dimension; for timm models they agree with "ndim <= 1".
bool skips_decay(const std::string& name, const torch::Tensor& p) {
  if (p.dim() <= 1) return true;
  if (name == "bias" || ends_with(name, ".bias") || ends_with(name, "gamma")) return true;
  if (ends_with(name, ".weight")) {
    std::string module = name.substr(0, name.size() - 7);
    std::string last = module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1);
    if (last.find("norm") != std::string::npos || last.rfind("bn", 0) == 0) return true;
  }
  return false;
}

torch::optim::OptimizerParamGroup& group_at(torch::optim::Optimizer& opt, size_t group) {
  auto& groups = opt.param_groups();
  if (group >= groups.size())
    throw std::out_of_range("optimizer group " + std::to_string(group) + " out of range (the optimizer has " +
                            std::to_string(groups.size()) + " groups)");
  return groups[group];
}

}  // namespace

std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, torch::Tensor>>& named_params) {
  // Always both groups, in this order, even if one is empty: group indices (per-group lr,
  // checkpoint keys "g{i}...") then do not depend on the model. Frozen parameters stay in, so
  // that unfreezing later (fine-tuning) trains them without rebuilding the optimizer.
  ParamGroup decay{"decay", {}, true, 1.0};
  ParamGroup no_decay{"no_decay", {}, false, 1.0};
  for (const auto& [name, p] : named_params) (skips_decay(name, p) ? no_decay : decay).params.push_back(p);
  return {std::move(decay), std::move(no_decay)};
}

// OptimizerOptions::get_lr/set_lr are virtual on 1.13 and 2.x and overridden by SGD/Adam/AdamW
// options, so no cast is needed here; other optimizers throw from the base class.
double get_lr(torch::optim::Optimizer& opt, size_t group) { return group_at(opt, group).options().get_lr(); }

void set_lr(torch::optim::Optimizer& opt, size_t group, double lr) {
  group_at(opt, group).options().set_lr(lr);
}

void set_momentum(torch::optim::Optimizer& opt, double momentum) {
  if (!(momentum >= 0 && momentum < 1))
    throw std::invalid_argument("set_momentum: " + std::to_string(momentum) + " is outside [0, 1)");
  for (auto& g : opt.param_groups()) {
    auto& o = g.options();
    if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&o)) {
      // Plain SGD (momentum = 0 in the recipe) stays plain: a one-cycle schedule must not turn a
      // deliberate "no momentum" into momentum.
      if (sgd->momentum() != 0) sgd->momentum(momentum);
    } else if (auto* adam = dynamic_cast<torch::optim::AdamOptions*>(&o)) {
      adam->betas(std::make_tuple(momentum, std::get<1>(adam->betas())));
    } else if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&o)) {
      adamw->betas(std::make_tuple(momentum, std::get<1>(adamw->betas())));
    }
  }
}

}  // namespace engine
