#pragma once
// FlatAdamW: torch::optim::AdamW with every parameter, gradient and moment buffer laid out in one
// flat buffer each (an "arena"), so that a step is a handful of vectorised passes over a group's
// range instead of ~10 small ops per parameter tensor.
//
// Why: convnext_atto has 128 parameter tensors; torch's AdamW runs ~1,300 ops per step, ~9 passes
// over 4 buffers of 3.4M floats: 15-16 ms of a ~80 ms step at 32 images per rank, 1 thread
// (measured, bench/RESULTS.md).
//
// Semantics are torch's AdamW: decoupled decay p *= 1 - lr*wd; m = b1 m + (1-b1) g;
// v = b2 v + (1-b2) g^2; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps), with the same per-parameter
// state (AdamWParamState, so optimizer_state(), load_optimizer_state() and checkpoints are
// unchanged) and parameters without a gradient (frozen) skipped. On CPU float32 a group is updated
// in one fused pass over memory (torch's ~9 separate ops are bandwidth-bound); its floats differ
// from torch's by rounding only (a few ulps: where FMAs contract). Other dtypes and devices run
// torch's ops, once per group. The flat update runs when every parameter has a gradient, all share one dtype and device,
// and each group's parameters are at the same step; otherwise (a frozen stage, amsgrad, a closure)
// the step is torch's own per-parameter AdamW::step.
//
// In a single-node DDP job the step is split over the ranks (ShardableStep, Accelerator::step):
// rank r sums the gradients of its share of the arena and updates that share, writing the
// parameters into every rank's arena (shared memory) and the moments into its own; the same bits
// as an all-reduce followed by this step on every rank.
//
// Side effects a caller can rely on: after the first step the parameters' data and gradients are
// views of the arena, in optimizer group order, back to back. Gradients accumulate into those views
// in place, so the gradient all-reduce of DDP reads and writes the arena without a copy (see
// Accelerator::sync_gradients), and zeroing the gradients is one fill. Anything that replaces a
// parameter's data or gradient (set_data, load, a new .grad) is noticed at the next step and
// copied back into the arena.
#include <torch/optim/adamw.h>

#include "components/optimizers/shardable_step.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace engine {

class FlatAdamW : public torch::optim::AdamW, public ShardableStep {
 public:
  FlatAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::AdamWOptions defaults);
  torch::Tensor step(LossClosure closure = nullptr) override;

  /// The step split over the ranks of a single-node DDP job (shardable_step.h): when the flat
  /// update applies, its buffers are the arena's (gradients, parameters, exp_avg, exp_avg_sq).
  bool begin_shared_step(std::vector<torch::Tensor>& buffers) override;
  void step_shared(const std::vector<int64_t>& edges, const std::vector<std::vector<float*>>& peers,
                   int rank) override;
  void gather_shares() override;

  /// Groups updated by the flat path in the last step (for tests and benchmarks).
  int64_t flat_groups_last_step() const { return flat_groups_; }

 private:
  struct Slot {
    torch::Tensor param, grad, exp_avg, exp_avg_sq;  // views of the arena, the parameter's strides
  };
  bool arena_matches() const;
  void build_arena();
  bool make_group_flat(size_t g);
  void step_group_flat(size_t g);
  /// The arena built for the current parameters (moments gathered first where a rebuild copies
  /// them) and every group ready for the flat update this step.
  bool flat_ready();
  int64_t advance_step(size_t g);  // the group's step count + 1, stored in every parameter's state

  torch::Tensor params_, grads_, exp_avg_, exp_avg_sq_;  // the arena: one 1-d buffer each
  std::vector<std::vector<Slot>> slots_;                 // [group][param]
  std::vector<std::pair<int64_t, int64_t>> range_;       // [group] -> [begin, end) in elements
  std::vector<torch::TensorImpl*> layout_;               // the parameters the arena was built for
  bool no_arena_ = false;                                // mixed dtypes/devices or sparse: never flat
  int64_t flat_groups_ = 0;
  // After a split step: the shares and every rank's moments, until gather_shares() copies the
  // other ranks' shares into this rank's arena (own_exp_avg: that arena's exp_avg, to know it).
  struct Split {
    std::vector<int64_t> edges;
    std::vector<float*> exp_avg, exp_avg_sq;
    int rank;
    const float* own_exp_avg;
  };
  std::optional<Split> split_;
};

}  // namespace engine
