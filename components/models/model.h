#pragma once
// Contract of every model (backbone + classifier head), timm-compatible:
// - forward(x): x is [N, in_chans, H, W] float; returns logits [N, num_classes] (or pooled
//   features [N, num_features] when num_classes == 0).
// - named_parameters() keys are exactly timm's state_dict keys (no wrapper prefix), so weights
//   load from and save to timm-compatible safetensors files.
// - Under bf16/fp16 autocast the model keeps normalisation in fp32 (CPU autocast in LibTorch 1.13
//   breaks layer_norm with low-precision input).
// - stages(): parameter names grouped by stage in order ("stem", "stages.0", ..., "head") so that
//   fine-tuning can freeze or re-weight them.
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  /// Smallest square input side the architecture accepts (ConvNeXt: 32).
  virtual int64_t min_input_size() const { return 1; }
  virtual int64_t num_classes() const = 0;
  /// Parameter name prefixes of each stage, input to output.
  virtual std::vector<std::string> stages() const = 0;
};

using ModelRegistry = Registry<Model>;

void register_models(ModelRegistry& registry);

}  // namespace engine
