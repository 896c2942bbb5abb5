#pragma once
// The [model] options every timm-style classifier reads (ResNetOptions and ConvNeXtOptions are
// aliases of this struct).
#include <string>

#include "engine/recipe/options.h"

namespace engine {

struct BackboneOptions {
  int64_t in_chans = 3;
  int64_t num_classes = 1000;   // 0: forward returns pooled features [N, num_features]
  double drop_path_rate = 0.0;  // stochastic depth, linspace(0, rate) over all blocks
  double drop_rate = 0.0;       // dropout before the classifier
  std::string pretrained;       // timm-keyed .safetensors (components/models/pretrained.h); "" = timm init
  bool channels_last = true;    // parameters and inputs in channels-last memory format
};

/// Reads the keys above from a [model] table, with a doc line each; `classifier` names the
/// classifier module in the docs ("fc", "head.fc"). A missing pretrained file is reported here,
/// before anything is built.
BackboneOptions read_backbone_options(Options& o, const std::string& classifier);

}  // namespace engine
