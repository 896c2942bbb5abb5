#include "engine/data/loader.h"

#include <doctest/doctest.h>

#include <torch/torch.h>

#include "engine/core/errors.h"

using namespace engine;

namespace {

// A small in-memory dataset: sample i is a 4x4 image filled with i, label i % 3.
class Counting : public Dataset {
 public:
  explicit Counting(size_t n, int side_of_odd = 4) : n_(n), odd_(side_of_odd) {}
  size_t size() const override { return n_; }
  Sample get(size_t i) const override {
    int side = i % 2 ? odd_ : 4;
    return {cv::Mat(side, side, CV_8UC1, cv::Scalar(static_cast<double>(i))), static_cast<int64_t>(i % 3)};
  }
  bool labeled() const override { return true; }
  int64_t num_classes() const override { return 3; }
  std::string describe() const override { return "counting"; }

 private:
  size_t n_;
  int odd_;
};

// Adds U(0,1) noise from the per-sample rng: tests that randomness is per sample, not per thread.
class Noise : public Transform {
 public:
  void apply(cv::Mat& img, Rng& rng) const override {
    img.convertTo(img, CV_32F);
    img += cv::Scalar(rng.uniform());
  }
};

std::vector<Batch> all_batches(Loader& l, std::vector<size_t> idx, int64_t epoch) {
  l.start(std::move(idx), epoch);
  std::vector<Batch> out;
  Batch b;
  while (l.next(b)) out.push_back(b);
  return out;
}

}  // namespace

TEST_CASE("batches come in order, collated NCHW, with labels and dataset indices") {
  auto ds = std::make_shared<Counting>(10);
  Loader l(ds, {}, LoaderOptions{4, 2, 2, false, 0});
  auto batches = all_batches(l, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, 0);
  REQUIRE(batches.size() == 3);
  CHECK(batches[2].images.sizes() == torch::IntArrayRef({2, 1, 4, 4}));
  CHECK(batches[0].indices[0].item<int64_t>() == 9);
  CHECK(batches[0].images[0].max().item<float>() == 9.0f);
  CHECK(batches[0].labels[0].item<int64_t>() == 0);
  CHECK(batches[2].indices[1].item<int64_t>() == 0);
}

TEST_CASE("same seed and epoch give identical batches whatever the worker count") {
  auto ds = std::make_shared<Counting>(37);
  std::vector<std::shared_ptr<const Transform>> tf{std::make_shared<Noise>()};
  std::vector<size_t> idx(37);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = (i * 7) % 37;
  Loader l0(ds, tf, LoaderOptions{8, 0, 1, false, 11});
  Loader l3(ds, tf, LoaderOptions{8, 3, 2, true, 11});
  auto a = all_batches(l0, idx, 4), b = all_batches(l3, idx, 4);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].images, b[i].images));
  auto c = all_batches(l3, idx, 5);  // another epoch draws other augmentations
  CHECK_FALSE(torch::equal(a[0].images, c[0].images));
}

TEST_CASE("images of different sizes in one batch are a clear error, raised to the consumer") {
  auto ds = std::make_shared<Counting>(4, 5);
  Loader l(ds, {}, LoaderOptions{4, 2, 2, false, 0});
  l.start({0, 1, 2, 3}, 0);
  Batch b;
  try {
    l.next(b);
    FAIL("expected an error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find("add a `resize` transform") != std::string::npos);
  }
}
