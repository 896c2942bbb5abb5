#pragma once
// ResNet (He et al. 2016) exactly as timm builds resnet18/34/50 (shared/reference/timm.md): same
// module names, hence the same state_dict keys (BatchNorm buffers included) and shapes, same
// parameter counts, same init. 7x7 stem, BasicBlock or Bottleneck (stride on the 3x3), 1x1 conv +
// BN projection shortcuts, global average pool, fc.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "components/models/backbone_options.h"
#include "components/models/model.h"

namespace engine {

/// One timm ResNet variant.
struct ResNetArch {
  std::string name;               // "resnet18"
  bool bottleneck;                // Bottleneck (1x1, 3x3, 1x1; x4 expansion) or BasicBlock (3x3, 3x3)
  std::array<int64_t, 4> depths;  // blocks per stage (layer1..layer4)
};

/// The registered variants: resnet18, resnet34, resnet50.
const std::vector<ResNetArch>& resnet_archs();

/// [model] options of a ResNet: in_chans, num_classes, drop_rate, drop_path_rate, pretrained,
/// channels_last (components/models/backbone_options.h).
using ResNetOptions = BackboneOptions;

struct ResNetParts;

/// The model. Construction initialises weights like timm from the global torch RNG (seed it
/// first); it does not load `pretrained` (make_resnet does).
class ResNet : public Model {
 public:
  ResNet(const ResNetArch& arch, const ResNetOptions& options);
  ~ResNet() override;

  /// x: [N, in_chans, H, W] with H, W >= min_input_size(); throws UserError on a wrong channel
  /// count or a too small input. Under bf16 autocast the convolutions and fc run in bf16;
  /// BatchNorm keeps fp32 statistics and running statistics.
  torch::Tensor forward(torch::Tensor x) override;
  /// Globally average-pooled features [N, num_features] (timm forward_head(pre_logits=True)).
  torch::Tensor forward_features(torch::Tensor x);
  /// 16: the network downsamples by 32 with rounding up, so MNIST's native 28x28 (fastai's
  /// resnet18-on-MNIST) reaches layer4 as 1x1 like 32x32 does; below 16 layer3 already sees one
  /// pixel and most 3x3 taps read padding.
  int64_t min_input_size() const override { return 16; }
  int64_t num_classes() const override { return options_.num_classes; }
  /// 512 (BasicBlock) or 2048 (Bottleneck).
  int64_t num_features() const;
  int64_t in_chans() const override { return options_.in_chans; }
  /// {stem: conv1, bn1}, layer1, layer2, layer3, layer4, {head: fc}.
  std::vector<ModelStage> stages() const override;
  std::string first_conv() const override { return "conv1"; }
  std::string classifier() const override { return "fc"; }
  const ResNetArch& arch() const { return arch_; }
  const ResNetOptions& options() const { return options_; }

  /// timm's init_weights: every conv kaiming_normal(fan_out, relu), BatchNorm ones/zeros with reset
  /// running statistics, the last BN of each block zero-initialised (zero_init_last). fc keeps
  /// the default Linear init drawn at construction, as in timm. Called by the constructor.
  void reset_parameters();

 private:
  ResNetArch arch_;
  ResNetOptions options_;
  std::unique_ptr<ResNetParts> parts_;  // typed handles to the submodules (owned by the module tree)
};

/// Builds the model and, when options.pretrained is set, loads it with load_pretrained
/// (components/models/pretrained.h: in_chans / num_classes adapted as timm, the rest strict).
std::unique_ptr<ResNet> make_resnet(const ResNetArch& arch, const ResNetOptions& options);
/// Same, by registered name ("resnet18"); an unknown name is a UserError listing the known ones.
std::unique_ptr<ResNet> make_resnet(const std::string& name, const ResNetOptions& options);

}  // namespace engine
