#pragma once
// Helpers shared by the optimizer components (sgd, adam, adamw), not part of the public contract:
// - readers for the options every optimizer validates the same way (lr > 0, betas in [0, 1),
//   eps > 0, weight_decay >= 0), recording errors at the key's recipe position;
// - build_optimizer(): one torch param group per engine ParamGroup, in order, with the group's
//   full options (lr * lr_scale, weight_decay 0 where decay == false) on LibTorch 1.13 and 2.x.
#include <torch/optim/optimizer.h>

#include <array>
#include <memory>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "components/optimizers/optimizer.h"
#include "engine/recipe/options.h"

namespace engine::optim_detail {

/// `lr`: a float > 0 (lr = 0 would silently train nothing).
double read_lr(Options& o, double def);
/// `weight_decay`: a float >= 0; `doc` says whether it is L2 (adam, sgd) or decoupled (adamw).
double read_weight_decay(Options& o, double def, std::string_view doc);
/// `betas`: two floats, each in [0, 1).
std::array<double, 2> read_betas(Options& o, const std::array<double, 2>& def);
/// `eps`: a float > 0.
double read_eps(Options& o, double def);

/// The key of parameter p in an optimizer's state map. The key type is deduced from the map instead
/// of branching on TORCH_VERSION: 1.13 uses c10::guts::to_string(impl) (an ostream of the pointer,
/// reproduced here), 2.x the pointer itself. `if constexpr` on a dependent type keeps the unused
/// branch from being compiled.
template <class StateMap>
typename StateMap::key_type state_key(const StateMap&, const torch::Tensor& p) {
  using Key = typename StateMap::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << p.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

/// Builds optimizer `Opt` (torch::optim::SGD/Adam/AdamW) with `base` as its defaults and one
/// param group per entry of `groups`, in order.
template <class Opt, class TorchOptions>
std::unique_ptr<torch::optim::Optimizer> build_optimizer(std::vector<ParamGroup> groups,
                                                         const TorchOptions& base) {
  std::vector<TorchOptions> group_options;
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  group_options.reserve(groups.size());
  torch_groups.reserve(groups.size());
  for (auto& g : groups) {
    TorchOptions o = base;
    o.lr(base.lr() * g.lr_scale);
    if (!g.decay) o.weight_decay(0.0);
    group_options.push_back(o);
    torch_groups.emplace_back(std::move(g.params), std::make_unique<TorchOptions>(o));
  }
  auto opt = std::make_unique<Opt>(std::move(torch_groups), base);
  // Recent LibTorch 2.x merges each group's options with the optimizer defaults, replacing fields
  // that equal the *constructor* defaults (e.g. Adam's weight_decay 0 of a no-decay group would
  // become the recipe's decay). Assigning every group's full options again undoes that; on 1.13
  // it is a no-op.
  for (size_t i = 0; i < group_options.size(); ++i)
    opt->param_groups()[i].set_options(std::make_unique<TorchOptions>(group_options[i]));
  return opt;
}

}  // namespace engine::optim_detail
