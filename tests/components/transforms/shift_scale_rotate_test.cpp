#include "components/transforms/shift_scale_rotate.h"

#include <doctest/doctest.h>

#include <opencv2/imgproc.hpp>

using namespace engine;

namespace {
cv::Mat ramp(int h, int w) {
  cv::Mat m(h, w, CV_8UC1);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) m.at<uint8_t>(y, x) = static_cast<uint8_t>(1 + y * w + x);
  return m;
}
ShiftScaleRotateOptions ssr_opts(double shift, double scale, double rotate, double p,
                             std::string interp = "linear") {
  ShiftScaleRotateOptions o;
  o.shift_limit = shift;
  o.scale_limit = scale;
  o.rotate_limit = rotate;
  o.p = p;
  o.interpolation = std::move(interp);
  return o;
}
double max_diff(const cv::Mat& a, const cv::Mat& b) { return cv::norm(a, b, cv::NORM_INF); }
}  // namespace

TEST_CASE("shift_scale_rotate matrix: 90 degrees about the pixel centre turns a square image exactly") {
  cv::Mat img = ramp(5, 5), out, expected;
  cv::Mat m = shift_scale_rotate_matrix(5, 5, 90.0, 1.0, 0.0, 0.0);
  cv::warpAffine(img, out, m, img.size(), cv::INTER_NEAREST, cv::BORDER_CONSTANT, 0);
  cv::rotate(img, expected, cv::ROTATE_90_COUNTERCLOCKWISE);  // positive angle = counter-clockwise
  CHECK(max_diff(out, expected) == 0);
}

TEST_CASE("shift_scale_rotate matrix: a pure shift moves pixels and fills the border with 0") {
  cv::Mat img = ramp(4, 6), out;
  cv::Mat m = shift_scale_rotate_matrix(6, 4, 0.0, 1.0, 2.0, 1.0);
  cv::warpAffine(img, out, m, img.size(), cv::INTER_LINEAR, cv::BORDER_CONSTANT, 0);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x) {
      CAPTURE(y);
      CAPTURE(x);
      int expected = (y >= 1 && x >= 2) ? img.at<uint8_t>(y - 1, x - 2) : 0;
      CHECK(out.at<uint8_t>(y, x) == expected);
    }
}

TEST_CASE("shift_scale_rotate draws angle, scale, dx, dy in order, shifts are fractions of W and H") {
  for (uint64_t seed : {1u, 2u, 3u}) {
    Rng expect(seed);
    const double angle = expect.uniform(-30, 30);
    const double scale = 1.0 + expect.uniform(-0.2, 0.2);
    const double dx = expect.uniform(-0.1, 0.1) * 20;  // width 20
    const double dy = expect.uniform(-0.1, 0.1) * 10;  // height 10
    cv::Mat img = ramp(10, 20), expected;
    cv::warpAffine(img, expected, shift_scale_rotate_matrix(20, 10, angle, scale, dx, dy), img.size(),
                   cv::INTER_LINEAR, cv::BORDER_CONSTANT, 0);
    Rng rng(seed);
    ShiftScaleRotate(ssr_opts(0.1, 0.2, 30, 1.0)).apply(img, rng);
    CHECK(img.type() == CV_8UC1);
    CHECK(max_diff(img, expected) == 0);
  }
}

TEST_CASE("shift_scale_rotate: zero limits are the identity, p=0 never fires, same seed, same output") {
  const cv::Mat base = ramp(8, 8);
  for (int s = 0; s < 50; ++s) {
    Rng a(s), b(s);
    cv::Mat identity = base.clone(), off = base.clone();
    ShiftScaleRotate(ssr_opts(0, 0, 0, 1.0)).apply(identity, a);
    ShiftScaleRotate(ssr_opts(0.2, 0.2, 45, 0.0)).apply(off, b);
    REQUIRE(max_diff(identity, base) == 0);
    REQUIRE(max_diff(off, base) == 0);
  }
  int changed = 0;
  for (int s = 0; s < 50; ++s) {
    Rng a(s), b(s);
    cv::Mat x = base.clone(), y = base.clone();
    ShiftScaleRotate(ssr_opts(0.1, 0.1, 20, 1.0, "cubic")).apply(x, a);
    ShiftScaleRotate(ssr_opts(0.1, 0.1, 20, 1.0, "cubic")).apply(y, b);
    REQUIRE(max_diff(x, y) == 0);
    changed += max_diff(x, base) > 0;
  }
  CHECK(changed == 50);
}

TEST_CASE("shift_scale_rotate keeps float images float and never writes the input buffer") {
  cv::Mat stored(6, 6, CV_32FC1, cv::Scalar(0.5)), copy = stored.clone();
  cv::Mat img = stored;
  Rng rng(4);
  ShiftScaleRotate(ssr_opts(0.1, 0.1, 30, 1.0)).apply(img, rng);
  CHECK(img.type() == CV_32FC1);
  CHECK(max_diff(stored, copy) == 0);
}
