#include "components/models/backbone_options.h"

#include <filesystem>

namespace engine {

BackboneOptions read_backbone_options(Options& o, const std::string& classifier) {
  BackboneOptions c;
  c.in_chans = o.integer("in_chans", c.in_chans, "input image channels (1 = grayscale, 3 = RGB)", 1);
  c.num_classes = o.integer("num_classes", c.num_classes, "classifier outputs; 0 = pooled features only", 0);
  c.drop_path_rate = o.number("drop_path_rate", c.drop_path_rate,
                              "stochastic depth, rising linearly over the blocks to this rate", 0.0, 1.0);
  if (c.drop_path_rate >= 1.0) o.error("drop_path_rate", "must be below 1 (1 drops every block)");
  c.drop_rate =
      o.number("drop_rate", c.drop_rate, "dropout before the classifier (" + classifier + ")", 0.0, 1.0);
  c.pretrained = o.text("pretrained", c.pretrained,
                        "timm-keyed .safetensors to start from (\"\" = random timm init); other in_chans or "
                        "num_classes are adapted as timm does");
  if (!o.describing() && !c.pretrained.empty() && !std::filesystem::is_regular_file(c.pretrained))
    o.error("pretrained", "file not found: " + c.pretrained, "paths are relative to the working directory");
  c.channels_last = o.flag("channels_last", c.channels_last,
                           "channels-last memory format for weights and inputs (faster convolutions on CPU)");
  return c;
}

}  // namespace engine
