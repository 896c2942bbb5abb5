#include "components/transforms/shift_scale_rotate.h"

#include <opencv2/imgproc.hpp>

#include "components/transforms/interpolation.h"

namespace engine {

ShiftScaleRotateOptions ShiftScaleRotateOptions::read(Options& o) {
  ShiftScaleRotateOptions d;
  d.shift_limit =
      o.number("shift_limit", d.shift_limit,
               "max shift as a fraction of width (x) and height (y), drawn independently", 0.0, 1.0);
  // scale_limit must stay below 1: scale = 1 - l would collapse the image to a point.
  d.scale_limit = o.number("scale_limit", d.scale_limit, "scale = 1 + U(-l, l)", 0.0, 0.99);
  d.rotate_limit = o.number("rotate_limit", d.rotate_limit, "max rotation in degrees, U(-l, l)", 0.0, 180.0);
  d.interpolation =
      o.choice("interpolation", d.interpolation, interpolation_names(), "resampling filter (OpenCV INTER_*)");
  d.p = o.number("p", d.p, "probability of applying", 0.0, 1.0);
  return d;
}

cv::Mat shift_scale_rotate_matrix(int width, int height, double angle, double scale, double dx, double dy) {
  // (W-1)/2 is the centre of the pixel grid (pixel centres at integer coordinates), as in
  // albumentations >= 1.4 (W/2 - 0.5); the earlier W/2 turned a square image by 90 degrees half a
  // pixel off the grid, leaving a black border.
  cv::Point2f centre(static_cast<float>((width - 1) * 0.5), static_cast<float>((height - 1) * 0.5));
  cv::Mat m = cv::getRotationMatrix2D(centre, angle, scale);
  m.at<double>(0, 2) += dx;
  m.at<double>(1, 2) += dy;
  return m;
}

ShiftScaleRotate::ShiftScaleRotate(ShiftScaleRotateOptions opts)
    : opts_(std::move(opts)), flag_(interpolation_flag(opts_.interpolation)) {}

void ShiftScaleRotate::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) return;
  // Draw order fixed as albumentations' get_params: angle, scale, dx, dy.
  const double angle = rng.uniform(-opts_.rotate_limit, opts_.rotate_limit);
  const double scale = 1.0 + rng.uniform(-opts_.scale_limit, opts_.scale_limit);
  const double dx = rng.uniform(-opts_.shift_limit, opts_.shift_limit);
  const double dy = rng.uniform(-opts_.shift_limit, opts_.shift_limit);
  cv::Mat m =
      shift_scale_rotate_matrix(image.cols, image.rows, angle, scale, dx * image.cols, dy * image.rows);
  cv::Mat out;
  cv::warpAffine(image, out, m, image.size(), flag_, cv::BORDER_CONSTANT, cv::Scalar::all(0));
  image = out;
}

void register_shift_scale_rotate(TransformRegistry& registry) {
  registry.add(
      "shift_scale_rotate",
      "random shift, scale and rotation about the centre, zero border (albumentations ShiftScaleRotate)",
      [](Options& o) -> TransformRegistry::Factory {
        auto opts = ShiftScaleRotateOptions::read(o);
        return [opts] { return std::make_unique<ShiftScaleRotate>(opts); };
      });
}

}  // namespace engine
