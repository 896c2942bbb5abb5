#include "components/transforms/random_brightness_contrast.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

namespace {


// The range a float image must be in, checked before anything is computed: clipping a 0..255
// image (or a normalised one with negatives) into [0, 1] destroys it, and doing that silently is
// the upstream pitfall this transform exists to avoid.
void check_float_range(const cv::Mat& image, double max_value) {
  double lo = 0, hi = 0;
  cv::minMaxIdx(image.reshape(1), &lo, &hi);
  if (hi > max_value)
    throw UserError("random_brightness_contrast: float image has values up to " + format_number(hi) +
                    " > max_value = " + format_number(max_value) + " (expected values in [0, " + format_number(max_value) +
                    "]); for float images in 0..255 set max_value = 255, or put this transform before "
                    "normalize / apply it to uint8 images");
  if (lo < 0)
    throw UserError("random_brightness_contrast: float image has negative values (min " + format_number(lo) +
                    ", expected values in [0, " + format_number(max_value) +
                    "]); put this transform before normalize, where pixels are still in 0..max_value");
}

}  // namespace

RandomBrightnessContrastOptions RandomBrightnessContrastOptions::read(Options& o) {
  RandomBrightnessContrastOptions d;
  d.brightness_limit = o.number("brightness_limit", d.brightness_limit,
                                "brightness shift fraction: beta = U(-l, l) * max_value (or * mean)", 0.0);
  d.contrast_limit =
      o.number("contrast_limit", d.contrast_limit, "contrast factor: alpha = 1 + U(-l, l)", 0.0);
  d.brightness_by_max = o.flag("brightness_by_max", d.brightness_by_max,
                               "scale beta by max_value (true) or by the image mean (false)");
  d.max_value =
      o.number("max_value", d.max_value,
               "top of a float image's range (0 = by dtype: 1.0 for float; uint8 is always 255)", 0.0);
  d.p = o.number("p", d.p, "probability of applying", 0.0, 1.0);
  return d;
}

void adjust_brightness_contrast(cv::Mat& image, double alpha, double beta_fraction, bool by_max,
                                double max_value) {
  const int depth = image.depth();
  if (depth != CV_8U && depth != CV_32F)
    throw UserError("random_brightness_contrast: unsupported image depth " + std::to_string(depth) +
                    " (expected uint8 or float32)");
  const double top = depth == CV_8U ? 255.0 : (max_value > 0 ? max_value : 1.0);
  if (depth == CV_32F) check_float_range(image, top);
  const double scale = by_max ? top : cv::mean(image.reshape(1))[0];
  const double beta = beta_fraction * scale;
  cv::Mat out;  // a new buffer: the caller's pixels may be shared
  if (depth == CV_8U) {
    // albumentations (albucore multiply_add LUT): float32 arithmetic, clip, truncate toward zero.
    cv::Mat lut(1, 256, CV_8U);
    const float a = static_cast<float>(alpha), b = static_cast<float>(beta);
    for (int i = 0; i < 256; ++i) {
      float v = std::min(std::max(static_cast<float>(i) * a + b, 0.0f), 255.0f);
      lut.at<uint8_t>(i) = static_cast<uint8_t>(v);
    }
    cv::LUT(image, lut, out);
  } else {
    image.convertTo(out, image.type(), alpha, beta);
    // Clip on a one-channel view: a scalar operand of cv::min/max only fills channel 0.
    cv::Mat flat = out.reshape(1);
    cv::min(flat, top, flat);
    cv::max(flat, 0.0, flat);
  }
  image = out;
}

void RandomBrightnessContrast::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) {
    // The range check runs even when the transform does not fire, so a misconfigured recipe fails
    // on its first sample instead of on a random later one.
    if (image.depth() == CV_32F) check_float_range(image, opts_.max_value > 0 ? opts_.max_value : 1.0);
    return;
  }
  const double alpha = 1.0 + rng.uniform(-opts_.contrast_limit, opts_.contrast_limit);
  const double beta = rng.uniform(-opts_.brightness_limit, opts_.brightness_limit);
  adjust_brightness_contrast(image, alpha, beta, opts_.brightness_by_max, opts_.max_value);
}

void register_random_brightness_contrast(TransformRegistry& registry) {
  registry.add("random_brightness_contrast",
               "img * (1 + U(-c, c)) + U(-b, b) * max_value, clipped to the image's range "
               "(albumentations RandomBrightnessContrast)",
               [](Options& o) -> TransformRegistry::Factory {
                 auto opts = RandomBrightnessContrastOptions::read(o);
                 return [opts] { return std::make_unique<RandomBrightnessContrast>(opts); };
               });
}

}  // namespace engine
