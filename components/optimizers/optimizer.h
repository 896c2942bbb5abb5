#pragma once
// Contract of every optimizer entry: build a torch::optim::Optimizer over parameter groups.
// - Groups keep their order; group i of the result is groups[i] (so per-group lr / freezing by
//   stage works, and checkpoints index state by (group, param)).
// - A group with decay == false gets weight_decay 0 (biases and norm weights, timm's default).
// - The learning rate set here is the *base* lr; schedulers scale it per step (set_lr below).
#include <torch/optim/optimizer.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

struct ParamGroup {
  std::string name;                   // e.g. "decay", "no_decay", or a stage name
  std::vector<torch::Tensor> params;
  bool decay = true;
  double lr_scale = 1.0;              // multiplies the optimizer's lr for this group
};

using OptimizerRegistry = Registry<torch::optim::Optimizer, std::vector<ParamGroup>>;

void register_optimizers(OptimizerRegistry& registry);

/// Splits a model's parameters timm's way: >= 2-D weights decay, 1-D (biases, norms, gamma) do not.
std::vector<ParamGroup> decay_groups(const std::vector<std::pair<std::string, torch::Tensor>>& named_params);

/// Current / new lr of group i (works for sgd, adam, adamw on LibTorch 1.13 and 2.x).
double get_lr(torch::optim::Optimizer& opt, size_t group);
void set_lr(torch::optim::Optimizer& opt, size_t group, double lr);
/// Sets the momentum-like hyper-parameter: SGD momentum, Adam/AdamW beta1. No-op where absent.
void set_momentum(torch::optim::Optimizer& opt, double momentum);

/// How optimizer_state hands out the buffers: copies (unchanged by later steps), or the live
/// buffers themselves, for a caller that is done with them before the next step (a checkpoint that
/// snapshots what it writes: one copy of the moments, not two; 170 MB each for a resnet34).
enum class StateCopy { copies, live };

/// The optimizer's per-parameter state as named tensors "g{group}.p{param}.{field}" (step counts
/// as int64 scalars), and back. Used by checkpoints: exact resume needs every buffer.
std::map<std::string, torch::Tensor> optimizer_state(torch::optim::Optimizer& opt, StateCopy how = StateCopy::copies);
void load_optimizer_state(torch::optim::Optimizer& opt, const std::map<std::string, torch::Tensor>& state);

}  // namespace engine
