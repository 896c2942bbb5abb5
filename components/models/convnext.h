#pragma once
// ConvNeXt (Liu et al. 2022) exactly as timm builds it (shared/reference/timm.md): same module
// names, hence the same state_dict keys and shapes, same parameter counts, same init. Registered
// as convnext_atto, _femto, _pico, _nano, _tiny and _small.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "components/models/backbone_options.h"
#include "components/models/model.h"

namespace engine {

/// One timm ConvNeXt variant.
struct ConvNeXtArch {
  std::string name;               // "convnext_atto"
  std::array<int64_t, 4> depths;  // blocks per stage
  std::array<int64_t, 4> dims;    // channels per stage
  bool conv_mlp;                  // MLP as 1x1 convs on NCHW (atto..nano) or Linear on NHWC
};

/// The registered variants, smallest first.
const std::vector<ConvNeXtArch>& convnext_archs();

/// [model] options of a ConvNeXt: in_chans, num_classes (0: forward returns pooled features
/// [N, dims[3]]), drop_rate (before head.fc), drop_path_rate, pretrained, channels_last
/// (components/models/backbone_options.h).
using ConvNeXtOptions = BackboneOptions;

struct ConvNeXtParts;

/// The model. Construction initialises weights like timm from the global torch RNG (seed it
/// first); it does not load `pretrained` (make_convnext does).
class ConvNeXt : public Model {
 public:
  ConvNeXt(const ConvNeXtArch& arch, const ConvNeXtOptions& options);
  ~ConvNeXt() override;

  /// x: [N, in_chans, H, W] with H, W >= 32; throws UserError on a wrong channel count or a too
  /// small input (naming the fix) instead of failing deep inside a convolution.
  torch::Tensor forward(torch::Tensor x) override;
  /// Pooled, normalised features [N, dims[3]] (timm forward_head(pre_logits=True)).
  torch::Tensor forward_features(torch::Tensor x);
  int64_t min_input_size() const override { return 32; }
  int64_t num_classes() const override { return options_.num_classes; }
  int64_t num_features() const { return arch_.dims[3]; }
  int64_t in_chans() const override { return options_.in_chans; }
  std::vector<ModelStage> stages() const override;
  std::string first_conv() const override { return "stem.0"; }
  std::string classifier() const override { return "head.fc"; }
  const ConvNeXtArch& arch() const { return arch_; }
  const ConvNeXtOptions& options() const { return options_; }

  /// timm's _init_weights: trunc_normal(std .02) conv/linear weights, zero biases, LN ones/zeros,
  /// gamma 1e-6. Called by the constructor; public for tests and re-initialisation.
  void reset_parameters();

 private:
  ConvNeXtArch arch_;
  ConvNeXtOptions options_;
  std::unique_ptr<ConvNeXtParts> parts_;  // typed handles to the submodules (owned by the module tree)
};

/// Builds the model and, when options.pretrained is set, loads it with load_pretrained
/// (components/models/pretrained.h: in_chans / num_classes adapted as timm, the rest strict).
std::unique_ptr<ConvNeXt> make_convnext(const ConvNeXtArch& arch, const ConvNeXtOptions& options);
/// Same, by registered name ("convnext_atto"); an unknown name is a UserError listing the known ones.
std::unique_ptr<ConvNeXt> make_convnext(const std::string& name, const ConvNeXtOptions& options);

}  // namespace engine
