#include "components/transforms/random_brightness_contrast.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "engine/core/errors.h"

using namespace engine;

namespace {
// Every uint8 value once, so one image checks the whole lookup table.
cv::Mat all_bytes() {
  cv::Mat m(1, 256, CV_8UC1);
  for (int i = 0; i < 256; ++i) m.at<uint8_t>(0, i) = static_cast<uint8_t>(i);
  return m;
}
// albumentations' uint8 table, written out independently: float32 math, clip, truncate.
uint8_t lut_value(int i, double alpha, double beta) {
  float v = static_cast<float>(i) * static_cast<float>(alpha) + static_cast<float>(beta);
  return static_cast<uint8_t>(std::min(std::max(v, 0.0f), 255.0f));
}
}  // namespace

TEST_CASE("uint8: fixed alpha/beta give albumentations' truncated lookup table") {
  cv::Mat img = all_bytes();
  adjust_brightness_contrast(img, 1.2, 0.1, true, 0);  // beta = 0.1 * 255 = 25.5
  REQUIRE(img.type() == CV_8UC1);
  CHECK(img.at<uint8_t>(0, 0) == 25);     // 25.5 truncated, not rounded
  CHECK(img.at<uint8_t>(0, 100) == 145);  // 145.5
  CHECK(img.at<uint8_t>(0, 200) == 255);  // 265.5 clipped

  cv::Mat dark = all_bytes();
  adjust_brightness_contrast(dark, 0.8, -0.1, true, 0);  // beta = -25.5
  CHECK(dark.at<uint8_t>(0, 0) == 0);
  CHECK(dark.at<uint8_t>(0, 100) == 54);   // 54.5
  CHECK(dark.at<uint8_t>(0, 255) == 178);  // 178.5
}

TEST_CASE("uint8: the transform draws alpha then beta from the Rng, as albumentations") {
  for (uint64_t seed : {1u, 7u, 42u}) {
    Rng expect(seed);
    const double alpha = 1.0 + expect.uniform(-0.2, 0.2);
    const double beta = expect.uniform(-0.2, 0.2) * 255.0;
    cv::Mat img = all_bytes();
    Rng rng(seed);
    RandomBrightnessContrast({0.2, 0.2, true, 0.0, 1.0}).apply(img, rng);
    int mismatches = 0;
    for (int i = 0; i < 256; ++i) mismatches += img.at<uint8_t>(0, i) != lut_value(i, alpha, beta);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("brightness_by_max = false scales beta by the image mean") {
  cv::Mat img(2, 2, CV_8UC1, cv::Scalar(100));
  adjust_brightness_contrast(img, 1.0, 0.5, false, 0);
  CHECK(img.at<uint8_t>(1, 1) == 150);
}

TEST_CASE("float32: range [0, max_value], 1.0 by default") {
  cv::Mat img = (cv::Mat_<float>(1, 3) << 0.0f, 0.5f, 1.0f);
  adjust_brightness_contrast(img, 1.2, 0.1, true, 0);
  REQUIRE(img.type() == CV_32FC1);
  CHECK(img.at<float>(0, 0) == doctest::Approx(0.1));
  CHECK(img.at<float>(0, 1) == doctest::Approx(0.7));
  CHECK(img.at<float>(0, 2) == doctest::Approx(1.0));  // clipped

  cv::Mat big = (cv::Mat_<float>(1, 2) << 100.0f, 250.0f);
  adjust_brightness_contrast(big, 1.0, 0.1, true, 255);  // beta = 25.5
  CHECK(big.at<float>(0, 0) == doctest::Approx(125.5));
  CHECK(big.at<float>(0, 1) == doctest::Approx(255.0));

  cv::Mat rgb(1, 1, CV_32FC3, cv::Scalar(0.9, 0.9, 0.9));  // every channel clipped, not only the first
  adjust_brightness_contrast(rgb, 2.0, 0.0, true, 0);
  CHECK(rgb.at<cv::Vec3f>(0, 0) == cv::Vec3f(1, 1, 1));
}

TEST_CASE("float32 images above max_value are an error, never silently crushed into [0, 1]") {
  cv::Mat img = (cv::Mat_<float>(1, 2) << 0.0f, 200.0f);
  for (double p : {1.0, 0.0}) {  // checked even when the transform does not fire
    Rng rng(3);
    cv::Mat copy = img.clone();
    try {
      RandomBrightnessContrast({0.2, 0.2, true, 0.0, p}).apply(copy, rng);
      FAIL("expected a UserError");
    } catch (const UserError& e) {
      std::string m = e.what();
      CHECK(m.find("max_value = 255") != std::string::npos);
      CHECK(m.find("before normalize") != std::string::npos);
    }
  }
  // Negative values (a normalised image) are refused too.
  cv::Mat normalised = (cv::Mat_<float>(1, 2) << -0.4f, 2.8f);
  Rng rng(3);
  CHECK_THROWS_AS(RandomBrightnessContrast({0.2, 0.2, true, 3.0, 1.0}).apply(normalised, rng), UserError);
  // With max_value = 255 a 0..255 float image is fine and stays in 0..255.
  cv::Mat ok = img.clone();
  RandomBrightnessContrast({0.2, 0.2, true, 255.0, 1.0}).apply(ok, rng);
  double lo, hi;
  cv::minMaxIdx(ok, &lo, &hi);
  CHECK(lo >= 0);
  CHECK(hi <= 255);
  CHECK(hi > 1);
}

TEST_CASE("p=0 never changes the image, the same seed gives the same output") {
  cv::Mat base = all_bytes();
  for (int s = 0; s < 100; ++s) {
    Rng rng(s);
    cv::Mat img = base.clone();
    RandomBrightnessContrast({0.5, 0.5, true, 0.0, 0.0}).apply(img, rng);
    REQUIRE(cv::norm(img, base, cv::NORM_INF) == 0);
  }
  Rng a(9), b(9);
  cv::Mat x = base.clone(), y = base.clone();
  RandomBrightnessContrast({0.3, 0.3, true, 0.0, 0.5}).apply(x, a);
  RandomBrightnessContrast({0.3, 0.3, true, 0.0, 0.5}).apply(y, b);
  CHECK(cv::norm(x, y, cv::NORM_INF) == 0);
}

TEST_CASE("the input buffer is never written") {
  cv::Mat stored = all_bytes();
  cv::Mat img = stored;
  adjust_brightness_contrast(img, 0.5, 0.0, true, 0);
  CHECK(stored.at<uint8_t>(0, 200) == 200);
  CHECK(img.at<uint8_t>(0, 200) == 100);
}
