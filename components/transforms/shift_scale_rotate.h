#pragma once
// shift_scale_rotate: a random affine about the image centre, albumentations ShiftScaleRotate (1.x
// semantics). Parameters are drawn in this order, each only when the transform fires:
//   angle = U(-rotate_limit, rotate_limit) degrees (counter-clockwise for positive angles)
//   scale = 1 + U(-scale_limit, scale_limit)
//   dx    = U(-shift_limit, shift_limit) * width,   dy = U(-shift_limit, shift_limit) * height
// M = cv::getRotationMatrix2D(centre, angle, scale) with the translation (dx, dy) added, applied
// with cv::warpAffine into an image of the same size; uncovered pixels are 0 (constant border).
// The centre is the exact pixel-grid centre ((W-1)/2, (H-1)/2), so a 90-degree turn of a square
// image maps pixels onto pixels. The augmentation for digits, where flips change the class.
#include <string>

#include "components/transforms/transform.h"

namespace engine {

struct ShiftScaleRotateOptions {
  double shift_limit = 0.0625;           // max shift as a fraction of width/height, in [0, 1]
  double scale_limit = 0.1;              // scale = 1 + U(-l, l), l in [0, 1)
  double rotate_limit = 45.0;            // max rotation in degrees, in [0, 180]
  std::string interpolation = "linear";  // nearest | linear | cubic | lanczos4 (area acts as linear)
  double p = 0.5;                        // probability of applying

  static ShiftScaleRotateOptions read(Options& o);
};

/// The 2x3 affine (CV_64F) for one draw: rotation by `angle` degrees and `scale` about the pixel
/// centre of a width x height image, then a shift by (dx, dy) pixels.
cv::Mat shift_scale_rotate_matrix(int width, int height, double angle, double scale, double dx, double dy);

class ShiftScaleRotate : public Transform {
 public:
  explicit ShiftScaleRotate(ShiftScaleRotateOptions opts);
  void apply(cv::Mat& image, Rng& rng) const override;
  const ShiftScaleRotateOptions& options() const { return opts_; }

 private:
  ShiftScaleRotateOptions opts_;
  int flag_;  // cv::INTER_* for opts_.interpolation
};

void register_shift_scale_rotate(TransformRegistry& registry);

}  // namespace engine
