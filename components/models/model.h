#pragma once
// Contract of every model (backbone + classifier head), timm-compatible:
// - forward(x): x is [N, in_chans, H, W] float; returns logits [N, num_classes] (or pooled
//   features [N, num_features] when num_classes == 0).
// - named_parameters() keys are exactly timm's state_dict keys (no wrapper prefix), so weights
//   load from and save to timm-compatible safetensors files.
// - Under bf16/fp16 autocast the model keeps normalisation in fp32 (CPU autocast in LibTorch 1.13
//   breaks layer_norm with low-precision input).
// - stages(): every parameter and buffer belongs to exactly one stage, input to output; the last
//   stage is the classifier head. Fine-tuning freezes the body (every stage but the last) and
//   spreads learning rates over the stages.
// - first_conv() / classifier(): module names of the input convolution and the classifier Linear
//   (timm's pretrained_cfg first_conv / classifier), so that a pretrained checkpoint with other
//   in_chans or num_classes can be adapted the way timm adapts it.
#include <torch/nn/module.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

/// A group of modules, named by key prefixes ("conv1" matches "conv1.weight", not "conv10.weight").
struct ModelStage {
  std::string name;                   // "stem", "layer1", "head"
  std::vector<std::string> prefixes;  // {"conv1", "bn1"}

  bool contains(const std::string& key) const;
};

/// Index of the stage that holds `key` in `stages`, or -1.
int stage_of(const std::vector<ModelStage>& stages, const std::string& key);

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  /// Smallest square input side the architecture accepts (ConvNeXt: 32).
  virtual int64_t min_input_size() const { return 1; }
  virtual int64_t num_classes() const = 0;
  virtual int64_t in_chans() const = 0;
  /// The stages, input to output; the last one is the classifier head.
  virtual std::vector<ModelStage> stages() const = 0;
  /// Module name of the input convolution ("stem.0", "conv1").
  virtual std::string first_conv() const = 0;
  /// Module name of the classifier Linear ("head.fc", "fc").
  virtual std::string classifier() const = 0;

  /// What load_pretrained (components/models/pretrained.h) adapted, one line for the main process
  /// to print ("" when no pretrained file was loaded or nothing needed adapting).
  const std::string& pretrained_note() const { return pretrained_note_; }
  void set_pretrained_note(std::string note) { pretrained_note_ = std::move(note); }

 protected:
  Model() = default;
  /// `name` is what Module::name() returns: the registered model name ("resnet18"), used in
  /// messages, instead of the C++ class name.
  explicit Model(std::string name) : torch::nn::Module(std::move(name)) {}

  /// Throws a UserError unless x is [N, in_chans(), H, W] with H, W >= min_input_size(), naming the
  /// model and the [model] or transform fix, instead of failing deep inside a convolution.
  void check_input(const torch::Tensor& x) const;
  /// Restrides every 4-D parameter to channels-last memory format. For the constructor: it must run
  /// before an optimizer holds the parameters.
  void to_channels_last();

 private:
  std::string pretrained_note_;
};

using ModelRegistry = Registry<Model>;

void register_models(ModelRegistry& registry);

}  // namespace engine
