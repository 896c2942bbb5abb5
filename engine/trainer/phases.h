#pragma once
// A fit is a list of phases, as data (DESIGN.md, "Loop"): plain training is one phase; fastai's
// fine_tune is a frozen phase followed by an unfrozen one with discriminative learning rates.
//
// fastai's Learner.fine_tune(epochs, base_lr, freeze_epochs, lr_mult, pct_start, div):
//   freeze(); fit_one_cycle(freeze_epochs, slice(base_lr), pct_start=0.99)
//   base_lr /= 2; unfreeze()
//   fit_one_cycle(epochs, slice(base_lr / lr_mult, base_lr), pct_start, div)
// where slice(stop) gives the head `stop` and every other group stop / 10, and slice(a, b) spreads
// geometrically from a (first group) to b (head). Here the groups are the model's stages
// (Model::stages(): stem, stages..., head). Frozen stages keep their normalisation layers
// trainable (fastai's train_bn); a frozen parameter has no gradient, so the optimizer leaves it
// exactly as it was (no weight decay, no momentum).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "components/models/model.h"
#include "components/optimizers/optimizer.h"
#include "components/schedulers/scheduler.h"
#include "engine/recipe/options.h"

namespace engine {

/// [train] fine_tune = { ... }: fastai's fine_tune arguments, with its defaults.
struct FineTuneOptions {
  bool enabled = false;
  int64_t freeze_epochs = 1;
  double base_lr = 2e-3;
  double lr_mult = 100;
  double pct_start = 0.3;
  double div = 5.0;
  static FineTuneOptions read(Options& o);
};

struct Phase {
  std::string name;                   // "train", "frozen", "unfrozen"
  int64_t epochs = 0;
  int64_t frozen_stages = 0;          // stages 0..frozen_stages-1 frozen (their norm layers train)
  std::vector<double> stage_lr;       // peak lr of each stage; empty = the optimizer's own lr
  std::shared_ptr<const Scheduler> scheduler;
};

/// The phases of a run: one "train" phase with the recipe's scheduler, or fine_tune's two.
std::vector<Phase> make_phases(const FineTuneOptions& fine_tune, int64_t epochs,
                               std::shared_ptr<const Scheduler> scheduler, size_t num_stages);

/// fastai's even_mults: n values from a to b, geometrically spaced (a when n == 1... b).
std::vector<double> even_mults(double a, double b, size_t n);

/// Parameter groups in stage order, each split timm's way into decay / no_decay (biases, norms,
/// layer scales): group 2*s is stage s with decay, 2*s+1 without. Every parameter is in one group;
/// a parameter outside every stage is a logic error (the model's stages() is incomplete).
struct StagedGroups {
  std::vector<ParamGroup> groups;
  std::vector<size_t> stage_of_group;
};
StagedGroups staged_param_groups(Model& model);

/// Freezes stages 0..frozen_stages-1 (requires_grad false, gradients dropped) except their
/// normalisation layers, unfreezes the rest. Returns the trainable parameters, in model order.
std::vector<torch::Tensor> apply_freeze(Model& model, int64_t frozen_stages);

/// True for BatchNorm and LayerNorm modules (fastai's norm_types, which train_bn keeps training).
bool is_norm_module(const torch::nn::Module& module);

}  // namespace engine
