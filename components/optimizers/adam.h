#pragma once
// adam: Adam (Kingma & Ba) with torch semantics. weight_decay is *L2*: it is added to the gradient
// before the moment estimates (use adamw for decoupled decay). Per parameter, at step t:
//   g = grad + weight_decay * p;  m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)     (amsgrad: max of all v)
// Defaults are torch's: lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0, amsgrad false.
#include <array>
#include <memory>
#include <string_view>
#include <vector>

#include "components/optimizers/optimizer.h"
#include "engine/recipe/options.h"

namespace engine {

struct AdamOptions {
  double lr = 1e-3;                         // base learning rate, > 0
  std::array<double, 2> betas{0.9, 0.999};  // each in [0, 1); beta1 is what set_momentum changes
  double eps = 1e-8;                        // > 0
  double weight_decay = 0.0;                // >= 0 (L2 here; decoupled in adamw)
  bool amsgrad = false;                     // keep the running max of v (Reddi et al.)
};

/// Reads the keys shared by adam and adamw, with `defaults` for the missing ones. `decay_doc`
/// is the doc line of weight_decay (L2 vs decoupled).
AdamOptions read_adam_like_options(Options& o, const AdamOptions& defaults, std::string_view decay_doc);

/// Reads and validates [optimizer] keys for adam.
AdamOptions read_adam_options(Options& o);

/// torch::optim::Adam over `groups` (see optimizer.h for the group contract).
std::unique_ptr<torch::optim::Optimizer> make_adam(const AdamOptions& options,
                                                   std::vector<ParamGroup> groups);

void register_adam(OptimizerRegistry& registry);

}  // namespace engine
