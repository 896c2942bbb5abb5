#pragma once
// BatchNorm2d that, inside a DDP job, normalises with the statistics of the whole global batch
// (PyTorch's SyncBatchNorm): 2 ranks x 32 then train what 1 rank x 64 trains, and the process
// layout stops changing what a BatchNorm model learns.
//
// The module has torch::nn::BatchNorm2d's parameters, buffers and state-dict keys (weight, bias,
// running_mean, running_var, num_batches_tracked) and its forward (torch::batch_norm); only its
// training forward inside a RankStatsScope differs: per channel, the rank sums its shifted sum and sum of squares (shift: the
// running mean, against cancellation), one all-reduce adds them over the ranks, and every rank
// normalises with the global mean and (biased) variance. The backward all-reduces the two sums the
// input gradient needs (of dy and of dy * x_hat); weight and bias gradients stay local, and the
// gradient all-reduce averages them like every other parameter's. Outside a scope (one process,
// evaluation) it computes what torch's BatchNorm2d does, with LibTorch's kernels; on small CPU maps
// (below kSplitMinElements, threads.h) on the calling thread alone, forward and backward, and with
// a following ReLU (and a residual sum before it) in the same autograd node (forward_relu).
#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include <functional>

namespace engine {

/// Adds a tensor over all ranks in place (every rank calls it in the same order).
using RankSum = std::function<void(torch::Tensor&)>;

/// While alive on this thread, BatchNorm2d layers in training use global batch statistics through
/// `sum`, which must outlive every backward of the forward passes run in the scope (the trainer
/// owns it). Nestable; nullptr turns the sync off inside.
class RankStatsScope {
 public:
  explicit RankStatsScope(const RankSum* sum);
  ~RankStatsScope();
  RankStatsScope(const RankStatsScope&) = delete;
  RankStatsScope& operator=(const RankStatsScope&) = delete;

 private:
  const RankSum* outer_;
};

/// BatchNorm2d(num_features) with torch's defaults: eps 1e-5, momentum 0.1, affine, running stats.
/// (Not a subclass of torch::nn::BatchNorm2dImpl: LibTorch does not export what a subclass's
/// vtable needs.)
class SyncBatchNorm2dImpl : public torch::nn::Cloneable<SyncBatchNorm2dImpl> {
 public:
  explicit SyncBatchNorm2dImpl(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  void reset() override;
  /// weight 1, bias 0, running mean 0, running var 1, num_batches_tracked 0 (torch's).
  void reset_parameters();
  torch::Tensor forward(const torch::Tensor& x);
  /// relu(forward(x) + residual) (residual optional), one autograd node in training on one process.
  torch::Tensor forward_relu(const torch::Tensor& x, const torch::Tensor& residual = {});
  void pretty_print(std::ostream& stream) const override;

  int64_t num_features;
  double eps, momentum;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  torch::Tensor normalise(const torch::Tensor& x, bool relu, const torch::Tensor& residual);
  torch::Tensor synced(const torch::Tensor& x, const RankSum& sum);  // the training forward in a RankStatsScope
};
TORCH_MODULE(SyncBatchNorm2d);

}  // namespace engine
