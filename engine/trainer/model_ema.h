#pragma once
// ModelEma: an exponential moving average of a model's weights, timm's ModelEmaV2 semantics.
//
// It holds its own copy of every parameter and buffer of the module (same dtype, device and memory
// format: channels-last parameters stay channels-last), and after each optimizer step
//     update(model, step):  ema = decay * ema + (1 - decay) * model     for floating tensors
//                           ema = model                                  for the others
// (BatchNorm's int64 num_batches_tracked is copied, as timm's ModelEmaV3 does; V2's blend of an
// integer counter is truncation noise). The running BN statistics are floating buffers and are
// averaged like the weights, as in timm.
//
// Tensors are matched by their dotted names (timm's state_dict keys), not by position: a module
// with a different structure is an error, never a silent mix-up.
//
// Optional warmup (off by default): the decay used at `step` is min(decay, (1 + step) / (10 + step))
// (TensorFlow's ExponentialMovingAverage num_updates rule), so early updates follow the fast-changing
// weights more closely: 0.1 at step 0, 0.5 at step 8, 0.9 at step 80. timm's ModelEmaV3 warmup uses
// a power law instead (1 - (1 + step)^(-2/3)); this rule is the simpler classic one.
//
// Evaluation and saving use swap_into(model): the EMA values go into the model's own tensors (so
// the model's forward, its optimizer references and its device placement are untouched) and the
// training values into the EMA; calling it again swaps back, bit for bit.
//
// Construct it after the model is on its device and in its final memory format. Not thread-safe.
#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace engine {

struct ModelEmaOptions {
  double decay = 0.9998;  // in [0, 1]; timm's recipes use 0.9998 (ImageNet, ~2.5k steps/epoch)
  bool warmup = false;    // decay = min(decay, (1 + step) / (10 + step))
};

class ModelEma {
 public:
  /// Copies every defined parameter and buffer of `model` (detached, requires_grad = false).
  /// std::invalid_argument when decay is outside [0, 1].
  ModelEma(const torch::nn::Module& model, double decay = 0.9998, bool warmup = false);
  ModelEma(const torch::nn::Module& model, const ModelEmaOptions& options);

  /// The decay update(model, step) uses.
  double decay_at(int64_t step) const;

  /// One EMA step after optimizer step `step` (0-based count of steps taken before this one; only
  /// the warmup reads it). No autograd. Throws std::invalid_argument when the model's tensor
  /// names, shapes, dtypes or devices differ from the EMA's.
  void update(const torch::nn::Module& model, int64_t step);

  /// ema = model for every tensor (timm's set(): after loading pretrained weights).
  void set(const torch::nn::Module& model);

  /// Exchanges the EMA values and the model's values in place (the model's tensors keep their
  /// identity, dtype, device and memory format). Calling it twice restores both exactly.
  void swap_into(torch::nn::Module& model);
  /// Runs fn() with the EMA values in `model` (evaluate, save), then swaps back, also when fn
  /// throws: the training weights are never left swapped out.
  template <class F>
  decltype(auto) with_weights(torch::nn::Module& model, F&& fn) {
    swap_into(model);
    struct SwapBack {
      ModelEma& ema;
      torch::nn::Module& model;
      ~SwapBack() { ema.swap_into(model); }
    } back{*this, model};
    return fn();
  }

  /// The EMA tensors by key, in state_dict order, as contiguous CPU copies in their own dtype
  /// (exact: resume continues bit for bit). Keys are the module's dotted names.
  NamedTensors state() const;
  /// Loads a state() (e.g. from a checkpoint) into the EMA tensors, converting device and keeping
  /// their memory format. Strict: a missing, unexpected or mis-shaped key is a UserError naming
  /// every problem; nothing changes then.
  void load_state(const NamedTensors& tensors);

  const ModelEmaOptions& options() const { return options_; }
  /// The EMA tensors themselves (live, on the model's device), in state_dict order.
  const NamedTensors& tensors() const { return ema_; }

 private:
  /// The model's tensors in EMA order, after checking they match (name, shape, dtype, device).
  std::vector<torch::Tensor> matching(const torch::nn::Module& model, const char* caller) const;

  ModelEmaOptions options_;
  NamedTensors ema_;
  std::vector<size_t> floating_;      // indices into ema_ of floating tensors (averaged)
  std::vector<size_t> non_floating_;  // indices of the others (copied)
};

}  // namespace engine
