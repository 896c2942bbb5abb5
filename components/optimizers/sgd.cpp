#include "components/optimizers/sgd.h"

#include <torch/optim/sgd.h>

#include "components/optimizers/optimizer_util.h"

namespace engine {

SgdOptions read_sgd_options(Options& o) {
  SgdOptions d;
  SgdOptions r;
  r.lr = optim_detail::read_lr(o, d.lr);
  r.momentum = o.number("momentum", d.momentum, "momentum factor in [0, 1); 0 = plain SGD", 0.0);
  // momentum < 1: at 1 the buffer never forgets and the step grows without bound.
  if (r.momentum >= 1) {
    o.error("momentum", "value " + std::to_string(r.momentum) + " is out of range, expected < 1",
            "typical: 0.9");
    r.momentum = d.momentum;
  }
  r.dampening = o.number("dampening", d.dampening, "dampening of the momentum update, in [0, 1]", 0.0, 1.0);
  r.weight_decay = optim_detail::read_weight_decay(
      o, d.weight_decay, "L2 penalty added to the gradient (>= 0); 0 in no-decay groups");
  r.nesterov = o.flag("nesterov", d.nesterov, "use Nesterov momentum (needs momentum > 0 and dampening = 0)");
  // torch checks this in the SGD constructor; checking it here reports it with a position and
  // before any model is built.
  if (r.nesterov && (r.momentum <= 0 || r.dampening != 0))
    o.error("nesterov", "nesterov = true needs momentum > 0 and dampening = 0",
            "set momentum = 0.9 and dampening = 0, or nesterov = false");
  return r;
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(const SgdOptions& options, std::vector<ParamGroup> groups) {
  torch::optim::SGDOptions base(options.lr);
  base.momentum(options.momentum)
      .dampening(options.dampening)
      .weight_decay(options.weight_decay)
      .nesterov(options.nesterov);
  return optim_detail::build_optimizer<torch::optim::SGD>(std::move(groups), base);
}

void register_sgd(OptimizerRegistry& registry) {
  registry.add("sgd", "SGD with momentum (torch semantics; L2 weight decay)",
               [](Options& o) -> OptimizerRegistry::Factory {
                 SgdOptions options = read_sgd_options(o);
                 return [options](std::vector<ParamGroup> groups) {
                   return make_sgd(options, std::move(groups));
                 };
               });
}

}  // namespace engine
