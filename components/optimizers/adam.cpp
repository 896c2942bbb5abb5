#include "components/optimizers/adam.h"

#include <torch/optim/adam.h>

#include "components/optimizers/optimizer_util.h"

namespace engine {

AdamOptions read_adam_like_options(Options& o, const AdamOptions& defaults, std::string_view decay_doc) {
  AdamOptions r;
  r.lr = optim_detail::read_lr(o, defaults.lr);
  r.betas = optim_detail::read_betas(o, defaults.betas);
  r.eps = optim_detail::read_eps(o, defaults.eps);
  r.weight_decay = optim_detail::read_weight_decay(o, defaults.weight_decay, decay_doc);
  r.amsgrad =
      o.flag("amsgrad", defaults.amsgrad, "use the AMSGrad variant (running max of the second moment)");
  return r;
}

AdamOptions read_adam_options(Options& o) {
  return read_adam_like_options(o, AdamOptions{},
                                "L2 penalty added to the gradient (>= 0; torch Adam semantics); "
                                "0 in no-decay groups. For decoupled decay use adamw");
}

std::unique_ptr<torch::optim::Optimizer> make_adam(const AdamOptions& options,
                                                   std::vector<ParamGroup> groups) {
  torch::optim::AdamOptions base(options.lr);
  base.betas(std::make_tuple(options.betas[0], options.betas[1]))
      .eps(options.eps)
      .weight_decay(options.weight_decay)
      .amsgrad(options.amsgrad);
  return optim_detail::build_optimizer<torch::optim::Adam>(std::move(groups), base);
}

void register_adam(OptimizerRegistry& registry) {
  registry.add("adam", "Adam (torch semantics; weight_decay is L2, see adamw for decoupled)",
               [](Options& o) -> OptimizerRegistry::Factory {
                 AdamOptions options = read_adam_options(o);
                 return [options](std::vector<ParamGroup> groups) {
                   return make_adam(options, std::move(groups));
                 };
               });
}

}  // namespace engine
