#include <doctest/doctest.h>

#include "components/transforms/horizontal_flip.h"
#include "components/transforms/vertical_flip.h"

using namespace engine;

namespace {
bool same(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}
}  // namespace

TEST_CASE("horizontal_flip mirrors columns exactly and keeps the dtype") {
  cv::Mat img = (cv::Mat_<uint8_t>(2, 3) << 1, 2, 3, 4, 5, 6);
  cv::Mat expected = (cv::Mat_<uint8_t>(2, 3) << 3, 2, 1, 6, 5, 4);
  Rng rng(1);
  HorizontalFlip({1.0}).apply(img, rng);
  CHECK(same(img, expected));

  // Multi-channel float: whole pixels move, channels stay in order.
  cv::Mat f(1, 2, CV_32FC3);
  f.at<cv::Vec3f>(0, 0) = {1, 2, 3};
  f.at<cv::Vec3f>(0, 1) = {4, 5, 6};
  HorizontalFlip({1.0}).apply(f, rng);
  CHECK(f.type() == CV_32FC3);
  CHECK(f.at<cv::Vec3f>(0, 0) == cv::Vec3f(4, 5, 6));
  CHECK(f.at<cv::Vec3f>(0, 1) == cv::Vec3f(1, 2, 3));
}

TEST_CASE("vertical_flip reverses rows exactly") {
  cv::Mat img = (cv::Mat_<uint8_t>(3, 2) << 1, 2, 3, 4, 5, 6);
  cv::Mat expected = (cv::Mat_<uint8_t>(3, 2) << 5, 6, 3, 4, 1, 2);
  Rng rng(1);
  VerticalFlip({1.0}).apply(img, rng);
  CHECK(same(img, expected));
}

TEST_CASE("flips never write into pixels shared with another Mat header") {
  cv::Mat stored = (cv::Mat_<uint8_t>(2, 2) << 1, 2, 3, 4);
  cv::Mat copy = stored.clone();
  cv::Mat img = stored;  // shares the buffer
  Rng rng(1);
  HorizontalFlip({1.0}).apply(img, rng);
  VerticalFlip({1.0}).apply(img, rng);
  CHECK(same(stored, copy));
  CHECK(img.at<uint8_t>(0, 0) == 4);
}

TEST_CASE("flip probability: p=0 never fires, p=1 always, p=0.5 about half the time") {
  const cv::Mat base = (cv::Mat_<uint8_t>(2, 2) << 1, 2, 3, 4);
  auto count = [&](double p, bool horizontal) {
    int fired = 0;
    for (int s = 0; s < 2000; ++s) {
      Rng rng(Rng::mix(s));
      cv::Mat img = base.clone();
      if (horizontal)
        HorizontalFlip({p}).apply(img, rng);
      else
        VerticalFlip({p}).apply(img, rng);
      fired += !same(img, base);
    }
    return fired;
  };
  for (bool h : {true, false}) {
    CHECK(count(0.0, h) == 0);
    CHECK(count(1.0, h) == 2000);
    int half = count(0.5, h);
    CHECK(half > 900);
    CHECK(half < 1100);
  }
}

TEST_CASE("the same seed gives the same flips") {
  for (int s = 0; s < 50; ++s) {
    cv::Mat a = (cv::Mat_<uint8_t>(2, 2) << 1, 2, 3, 4), b = a.clone();
    Rng ra(s), rb(s);
    HorizontalFlip({0.5}).apply(a, ra);
    VerticalFlip({0.5}).apply(a, ra);
    HorizontalFlip({0.5}).apply(b, rb);
    VerticalFlip({0.5}).apply(b, rb);
    CHECK(same(a, b));
  }
}
