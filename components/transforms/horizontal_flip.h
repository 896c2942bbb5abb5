#pragma once
// horizontal_flip: mirrors the image horizontally (left-right) with probability p (albumentations
// HorizontalFlip): out[:, x] = in[:, W-1-x]. Any dtype and channel count; dtype and values kept exactly. Not
// for digits (a mirrored 2 or 7 is no longer that digit): use shift_scale_rotate there.
#include "components/transforms/transform.h"

namespace engine {

struct HorizontalFlipOptions {
  double p = 0.5;  // probability of flipping

  /// Reads `p` (in [0, 1]) from a [[...transforms]] table.
  static HorizontalFlipOptions read(Options& o);
};

class HorizontalFlip : public Transform {
 public:
  explicit HorizontalFlip(HorizontalFlipOptions opts) : opts_(opts) {}
  void apply(cv::Mat& image, Rng& rng) const override;
  const HorizontalFlipOptions& options() const { return opts_; }

 private:
  HorizontalFlipOptions opts_;
};

void register_horizontal_flip(TransformRegistry& registry);

}  // namespace engine
