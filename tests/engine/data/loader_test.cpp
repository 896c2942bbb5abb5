#include "engine/data/loader.h"

#include <doctest/doctest.h>

#include <torch/torch.h>

#include "components/datasets/digit_csv.h"
#include "components/transforms/normalize.h"
#include "components/transforms/resize.h"
#include "components/transforms/shift_scale_rotate.h"
#include "engine/core/errors.h"
#include "tests/support/paths.h"

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

namespace {

// The shipped recipe's evaluation transforms on real digits: lanczos4 to 40 x 40, then normalize.
std::vector<std::shared_ptr<const Transform>> eval_transforms(double normalize_p = 1.0) {
  ResizeOptions r;
  r.height = r.width = 40;
  r.interpolation = "lanczos4";
  NormalizeOptions n;
  n.p = normalize_p;
  n.mean = {0.1310};
  n.std = {0.30854};
  return {std::make_shared<Resize>(r), std::make_shared<Normalize>(n)};
}

std::shared_ptr<const Dataset> digits() {
  DigitCsvOptions o;
  o.path = test::mnist_file("train.csv");
  return std::make_shared<DigitCsv>(o);
}

std::vector<size_t> first(size_t n) {
  std::vector<size_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = i;
  return idx;
}

}  // namespace

TEST_CASE("an evaluation loader keeps its transformed digits: later passes give the same bits without transforming again") {
  auto ds = digits();
  const int64_t per_image = 40 * 40 * static_cast<int64_t>(sizeof(float));
  Loader plain(ds, eval_transforms(), LoaderOptions{32, 2, 2, true, 7});
  Loader kept(ds, eval_transforms(), LoaderOptions{32, 2, 2, true, 7, 1 << 20});
  const auto want = all_batches(plain, first(100), 0);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {  // the seed and epoch do not matter to these transforms
    const auto got = all_batches(kept, first(100), epoch);
    REQUIRE(got.size() == want.size());
    for (size_t b = 0; b < got.size(); ++b) {
      CHECK(torch::equal(got[b].images, want[b].images));
      CHECK(torch::equal(got[b].labels, want[b].labels));
      CHECK(torch::equal(got[b].indices, want[b].indices));
    }
    CHECK(kept.cached_samples() == 100);
    CHECK(kept.cached_bytes() == 100 * per_image);
  }
  CHECK(plain.cached_samples() == 0);  // cache_bytes 0: nothing kept

  // Past the budget the loader keeps what fits and transforms the rest each pass, with the same bits.
  Loader small(ds, eval_transforms(), LoaderOptions{32, 2, 2, true, 7, 10 * per_image});
  for (int pass = 0; pass < 2; ++pass) {
    const auto got = all_batches(small, first(100), pass);
    for (size_t b = 0; b < got.size(); ++b) CHECK(torch::equal(got[b].images, want[b].images));
    CHECK(small.cached_samples() == 10);
  }
}

TEST_CASE("a loader with a random transform keeps nothing: each epoch draws its own augmentation") {
  auto ds = digits();
  ShiftScaleRotateOptions ssr;
  ssr.p = 1.0;
  std::vector<std::shared_ptr<const Transform>> train{std::make_shared<ShiftScaleRotate>(ssr)};
  for (auto& t : eval_transforms()) train.push_back(t);
  Loader l(ds, train, LoaderOptions{16, 2, 2, true, 7, 1 << 20});
  const auto e0 = all_batches(l, first(16), 0);
  const auto e1 = all_batches(l, first(16), 1);
  CHECK(l.cached_samples() == 0);
  CHECK_FALSE(torch::equal(e0[0].images, e1[0].images));
  // A transform that fires with p < 1 draws from the rng too.
  Loader maybe(ds, eval_transforms(0.5), LoaderOptions{16, 2, 2, true, 7, 1 << 20});
  all_batches(maybe, first(16), 0);
  CHECK(maybe.cached_samples() == 0);
}
