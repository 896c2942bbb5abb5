#pragma once
// random_brightness_contrast: albumentations RandomBrightnessContrast, with explicit value ranges.
//   alpha = 1 + U(-contrast_limit, contrast_limit)       (drawn first, as albumentations does)
//   beta  = U(-brightness_limit, brightness_limit) * (brightness_by_max ? max_value : mean(image))
//   out   = clip(img * alpha + beta, 0, max_value)        (no centring on the mean)
// CV_8U: max_value is 255 whatever the option says; the result comes from albumentations' lookup
//   table, clip(float32(i) * alpha + beta, 0, 255) truncated to uint8.
// CV_32F: max_value is the option, or 1.0 when it is 0. Upstream silently crushes float images in
//   0..255 into [0, 1]; here a float image with values above max_value (or below 0, e.g. after
//   normalize) is a UserError naming the fix, checked on every image whether or not it fires.
// Other depths are a UserError.
#include "components/transforms/transform.h"

namespace engine {

struct RandomBrightnessContrastOptions {
  double brightness_limit = 0.2;  // beta fraction drawn from U(-l, l), l >= 0
  double contrast_limit = 0.2;    // alpha = 1 + U(-l, l), l >= 0
  bool brightness_by_max = true;  // beta scaled by max_value (true) or by the image mean (false)
  double max_value = 0.0;         // float images' range top; 0 = by dtype (255 uint8, 1.0 float)
  double p = 0.5;                 // probability of applying

  static RandomBrightnessContrastOptions read(Options& o);
};

/// The deterministic core, for tests and for callers that choose alpha/beta themselves:
/// out = clip(img * alpha + beta_fraction * scale, 0, max) where scale is max_value or mean(image)
/// per `by_max`, exactly as apply() does after drawing alpha and beta_fraction.
/// `max_value` as in the options (0 = by dtype). Throws UserError for out-of-range float input.
void adjust_brightness_contrast(cv::Mat& image, double alpha, double beta_fraction, bool by_max,
                                double max_value);

class RandomBrightnessContrast : public Transform {
 public:
  explicit RandomBrightnessContrast(RandomBrightnessContrastOptions opts) : opts_(opts) {}
  void apply(cv::Mat& image, Rng& rng) const override;
  const RandomBrightnessContrastOptions& options() const { return opts_; }

 private:
  RandomBrightnessContrastOptions opts_;
};

void register_random_brightness_contrast(TransformRegistry& registry);

}  // namespace engine
