#pragma once
// normalize: per-channel standardisation, albumentations Normalize:
//   out = (img - mean * max_pixel_value) / (std * max_pixel_value), always CV_32F.
// With the defaults (ImageNet mean/std, max_pixel_value = 255) a uint8 image or a float image in
// 0..255 becomes roughly zero-mean, unit-variance. For a float image already in 0..1 set
// max_pixel_value = 1. mean/std have one value (used for every channel) or one per channel; any
// other length is a UserError when the first image arrives (the channel count is known only then).
// Reference: mean = [0.1310], std = [0.30854] maps 0 -> -0.424580, 127.5 -> 1.195955, 255 -> 2.816491.
#include <vector>

#include "components/transforms/transform.h"

namespace engine {

struct NormalizeOptions {
  std::vector<double> mean = {0.485, 0.456, 0.406};  // per-channel mean, in units of max_pixel_value
  std::vector<double> std = {0.229, 0.224, 0.225};   // per-channel std (> 0), same units
  double max_pixel_value = 255.0;                    // the value that means "1.0" in the input
  double p = 1.0;                                    // probability of applying

  /// Reads and validates the options: non-empty mean/std, std > 0, max_pixel_value > 0, and
  /// mean/std lengths compatible (equal, or one of them 1).
  static NormalizeOptions read(Options& o);
};

class Normalize : public Transform {
 public:
  explicit Normalize(NormalizeOptions opts) : opts_(std::move(opts)) {}
  /// Throws UserError when mean/std do not fit the image's channel count.
  void apply(cv::Mat& image, Rng& rng) const override;
  bool random() const override { return opts_.p < 1.0; }
  const NormalizeOptions& options() const { return opts_; }

 private:
  NormalizeOptions opts_;
};

void register_normalize(TransformRegistry& registry);

}  // namespace engine
