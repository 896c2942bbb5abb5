#pragma once
// sgd: stochastic gradient descent with (heavy-ball or Nesterov) momentum, torch semantics:
//   g = grad + weight_decay * p                  (L2, only in groups with decay == true)
//   buf = g on the first step, then buf = momentum * buf + (1 - dampening) * g
//   step = nesterov ? g + momentum * buf : buf
//   p -= lr * step
// Defaults follow timm's SGD recipes: lr 0.1 (its reference for a global batch of 256),
// momentum 0.9; nesterov off and no weight decay unless the recipe asks.
#include <memory>
#include <vector>

#include "components/optimizers/optimizer.h"
#include "engine/recipe/options.h"

namespace engine {

struct SgdOptions {
  double lr = 0.1;            // base learning rate, > 0
  double momentum = 0.9;      // in [0, 1); 0 = plain SGD (then set_momentum leaves it alone)
  double dampening = 0.0;     // in [0, 1]; must be 0 with nesterov
  double weight_decay = 0.0;  // L2 penalty, >= 0
  bool nesterov = false;      // Nesterov momentum (needs momentum > 0, dampening 0)
};

/// Reads and validates [optimizer] keys for sgd; errors are recorded with recipe positions.
SgdOptions read_sgd_options(Options& o);

/// torch::optim::SGD over `groups` (see optimizer.h for the group contract).
std::unique_ptr<torch::optim::Optimizer> make_sgd(const SgdOptions& options, std::vector<ParamGroup> groups);

void register_sgd(OptimizerRegistry& registry);

}  // namespace engine
