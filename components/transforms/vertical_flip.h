#pragma once
// vertical_flip: mirrors the image vertically (top-bottom) with probability p (albumentations VerticalFlip):
// out[y, :] = in[H-1-y, :]. Any dtype and channel count; dtype and values kept exactly.
// Not for digits (a mirrored 2 or 7 is no longer that digit): use shift_scale_rotate there.
#include "components/transforms/transform.h"

namespace engine {

struct VerticalFlipOptions {
  double p = 0.5;  // probability of flipping

  /// Reads `p` (in [0, 1]) from a [[...transforms]] table.
  static VerticalFlipOptions read(Options& o);
};

class VerticalFlip : public Transform {
 public:
  explicit VerticalFlip(VerticalFlipOptions opts) : opts_(opts) {}
  void apply(cv::Mat& image, Rng& rng) const override;
  const VerticalFlipOptions& options() const { return opts_; }

 private:
  VerticalFlipOptions opts_;
};

void register_vertical_flip(TransformRegistry& registry);

}  // namespace engine
