#include "components/transforms/normalize.h"

#include <doctest/doctest.h>

#include "engine/core/errors.h"

using namespace engine;

TEST_CASE("normalize matches albumentations' reference values for MNIST mean/std") {
  NormalizeOptions o;
  o.mean = {0.1310};
  o.std = {0.30854};
  cv::Mat img = (cv::Mat_<float>(1, 3) << 0.0f, 127.5f, 255.0f);
  Rng rng(0);
  Normalize(o).apply(img, rng);
  REQUIRE(img.type() == CV_32FC1);
  CHECK(img.at<float>(0, 0) == doctest::Approx(-0.424580).epsilon(1e-6));
  CHECK(img.at<float>(0, 1) == doctest::Approx(1.195955).epsilon(1e-6));
  CHECK(img.at<float>(0, 2) == doctest::Approx(2.816491).epsilon(1e-6));

  // uint8 input gives the same numbers, as float32.
  cv::Mat u = (cv::Mat_<uint8_t>(1, 2) << 0, 255);
  Normalize(o).apply(u, rng);
  REQUIRE(u.type() == CV_32FC1);
  CHECK(u.at<float>(0, 0) == doctest::Approx(-0.424580).epsilon(1e-6));
  CHECK(u.at<float>(0, 1) == doctest::Approx(2.816491).epsilon(1e-6));
}

TEST_CASE("normalize uses one mean/std per channel (ImageNet defaults on RGB)") {
  cv::Mat img(1, 1, CV_8UC3, cv::Scalar(255, 0, 128));
  Rng rng(0);
  Normalize(NormalizeOptions{}).apply(img, rng);
  REQUIRE(img.type() == CV_32FC3);
  cv::Vec3f v = img.at<cv::Vec3f>(0, 0);
  CHECK(v[0] == doctest::Approx((1.0 - 0.485) / 0.229).epsilon(1e-6));
  CHECK(v[1] == doctest::Approx((0.0 - 0.456) / 0.224).epsilon(1e-6));
  CHECK(v[2] == doctest::Approx((128.0 / 255 - 0.406) / 0.225).epsilon(1e-6));
}

TEST_CASE("normalize with max_pixel_value = 1 takes float images in 0..1, one value serves every channel") {
  NormalizeOptions o;
  o.mean = {0.5};
  o.std = {0.25};
  o.max_pixel_value = 1.0;
  cv::Mat img(2, 2, CV_32FC(5));
  img.reshape(1).setTo(1.0);  // cv::Scalar stops at 4 channels
  Rng rng(0);
  Normalize(o).apply(img, rng);
  REQUIRE(img.type() == CV_32FC(5));
  const float* p = img.ptr<float>(1);
  for (int i = 0; i < 10; ++i) CHECK(p[i] == doctest::Approx(2.0));
}

TEST_CASE("normalize rejects a mean/std whose length does not fit the channel count") {
  NormalizeOptions o;  // 3 values each
  cv::Mat gray(2, 2, CV_8UC1, cv::Scalar(10));
  Rng rng(0);
  try {
    Normalize(o).apply(gray, rng);
    FAIL("expected a UserError");
  } catch (const UserError& e) {
    std::string m = e.what();
    CHECK(m.find("mean has 3 values but the image has 1 channel") != std::string::npos);
  }
}

TEST_CASE("normalize never writes into the input's buffer, p=0 leaves the image untouched") {
  cv::Mat stored(2, 2, CV_8UC1, cv::Scalar(200));
  cv::Mat img = stored;
  Rng rng(0);
  NormalizeOptions o;
  o.mean = {0.5};
  o.std = {0.5};
  Normalize(o).apply(img, rng);
  CHECK(stored.at<uint8_t>(0, 0) == 200);
  CHECK(img.type() == CV_32FC1);

  o.p = 0.0;
  cv::Mat untouched(2, 2, CV_8UC1, cv::Scalar(7));
  Normalize(o).apply(untouched, rng);
  CHECK(untouched.type() == CV_8UC1);
}
