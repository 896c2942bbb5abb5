#include "components/optimizers/adamw.h"

#include <torch/optim/adamw.h>

#include "components/optimizers/flat_adamw.h"
#include "components/optimizers/optimizer_util.h"

namespace engine {

AdamWOptions read_adamw_options(Options& o) {
  AdamWOptions r;
  static_cast<AdamOptions&>(r) = read_adam_like_options(
      o, AdamWOptions{},
      "decoupled weight decay (>= 0): p *= 1 - lr * weight_decay each step; 0 in no-decay groups");
  return r;
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(const AdamWOptions& options,
                                                    std::vector<ParamGroup> groups) {
  torch::optim::AdamWOptions base(options.lr);
  base.betas(std::make_tuple(options.betas[0], options.betas[1]))
      .eps(options.eps)
      .weight_decay(options.weight_decay)
      .amsgrad(options.amsgrad);
  return optim_detail::build_optimizer<FlatAdamW>(std::move(groups), base);
}

void register_adamw(OptimizerRegistry& registry) {
  registry.add("adamw", "AdamW: Adam with decoupled weight decay (torch semantics)",
               [](Options& o) -> OptimizerRegistry::Factory {
                 AdamWOptions options = read_adamw_options(o);
                 return [options](std::vector<ParamGroup> groups) {
                   return make_adamw(options, std::move(groups));
                 };
               });
}

}  // namespace engine
