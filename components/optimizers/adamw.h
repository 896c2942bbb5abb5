#pragma once
// adamw: Adam with decoupled weight decay (Loshchilov & Hutter), torch semantics:
//   p *= 1 - lr * weight_decay   (before the Adam update; only in groups with decay == true)
//   then the Adam update of adam.h with the raw gradient.
// Defaults are torch's: lr 1e-3, betas [0.9, 0.999], eps 1e-8, weight_decay 0.01, amsgrad false.
#include <memory>
#include <vector>

#include "components/optimizers/adam.h"

namespace engine {

/// Same fields as adam; only the meaning and the default of weight_decay differ.
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 0.01; }
};

/// Reads and validates [optimizer] keys for adamw.
AdamWOptions read_adamw_options(Options& o);

/// FlatAdamW (torch::optim::AdamW semantics, flat buffers: flat_adamw.h) over `groups` (see
/// optimizer.h for the group contract).
std::unique_ptr<torch::optim::Optimizer> make_adamw(const AdamWOptions& options,
                                                    std::vector<ParamGroup> groups);

void register_adamw(OptimizerRegistry& registry);

}  // namespace engine
