#pragma once
// Shared by the ConvNeXt tests: options without TOML.
#include "components/models/convnext.h"

namespace engine::test {

inline ConvNeXtOptions convnext_opts(int64_t in_chans, int64_t num_classes, bool channels_last = true) {
  ConvNeXtOptions o;
  o.in_chans = in_chans;
  o.num_classes = num_classes;
  o.channels_last = channels_last;
  return o;
}

}  // namespace engine::test
