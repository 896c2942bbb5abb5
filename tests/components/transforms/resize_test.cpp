#include "components/transforms/resize.h"

#include <doctest/doctest.h>

#include <opencv2/imgproc.hpp>

using namespace engine;

namespace {
cv::Mat random_image(int h, int w, int type, uint64_t seed) {
  cv::Mat m(h, w, type);
  cv::RNG r(seed);
  r.fill(m, cv::RNG::UNIFORM, 0, 256);
  return m;
}
ResizeOptions resize_opts(int h, int w, const std::string& interp = "linear", double p = 1.0) {
  ResizeOptions o;
  o.height = h;
  o.width = w;
  o.interpolation = interp;
  o.p = p;
  return o;
}
}  // namespace

TEST_CASE("resize produces size = [h, w] (rows, cols) and keeps dtype and channels") {
  cv::Mat img = random_image(28, 28, CV_8UC1, 1);
  Rng rng(0);
  Resize(resize_opts(10, 20)).apply(img, rng);
  CHECK(img.rows == 10);
  CHECK(img.cols == 20);
  CHECK(img.type() == CV_8UC1);

  cv::Mat rgb = random_image(7, 5, CV_32FC3, 2);
  Resize(resize_opts(56, 56, "cubic")).apply(rgb, rng);
  CHECK(rgb.size() == cv::Size(56, 56));
  CHECK(rgb.type() == CV_32FC3);
}

TEST_CASE("resize leaves an image of the target size unchanged (same pixels, no resampling)") {
  cv::Mat img = random_image(28, 28, CV_8UC1, 3);
  const uchar* before = img.data;
  cv::Mat copy = img.clone();
  Rng rng(0);
  Resize(resize_opts(28, 28, "lanczos4")).apply(img, rng);
  CHECK(img.data == before);
  CHECK(cv::norm(img, copy, cv::NORM_INF) == 0);
}

TEST_CASE("each interpolation name is exactly cv::resize with the matching INTER_* flag") {
  const std::pair<const char*, int> cases[] = {{"nearest", cv::INTER_NEAREST},
                                               {"linear", cv::INTER_LINEAR},
                                               {"cubic", cv::INTER_CUBIC},
                                               {"area", cv::INTER_AREA},
                                               {"lanczos4", cv::INTER_LANCZOS4}};
  for (const auto& [interp, flag] : cases) {
    const char* name = interp;  // CAPTURE is a lambda: clang cannot capture a structured binding in C++17
    CAPTURE(name);
    for (int type : {CV_8UC1, CV_32FC1}) {
      cv::Mat src = random_image(28, 28, type, 4);
      cv::Mat expected;
      cv::resize(src, expected, cv::Size(56, 56), 0, 0, flag);
      cv::Mat img = src.clone();
      Rng rng(0);
      Resize(resize_opts(56, 56, name)).apply(img, rng);
      CHECK(cv::norm(img, expected, cv::NORM_INF) == 0);
    }
  }
}

TEST_CASE("resize p=0 never fires, the input buffer is never written") {
  cv::Mat img = random_image(8, 8, CV_8UC1, 5);
  Rng rng(0);
  Resize(resize_opts(16, 16, "linear", 0.0)).apply(img, rng);
  CHECK(img.size() == cv::Size(8, 8));

  cv::Mat stored = random_image(8, 8, CV_8UC1, 6), copy = stored.clone();
  cv::Mat view = stored;
  Resize(resize_opts(4, 4, "area")).apply(view, rng);
  CHECK(view.size() == cv::Size(4, 4));
  CHECK(cv::norm(stored, copy, cv::NORM_INF) == 0);
}
