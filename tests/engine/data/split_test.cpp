#include "engine/data/split.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "engine/core/errors.h"

using namespace engine;

TEST_CASE("a fraction split is disjoint, complete, seeded, and keeps valid in file order") {
  SplitOptions o;
  o.valid_fraction = 0.2;
  o.seed = 5;
  Split s = make_split(1000, o);
  CHECK(s.train.size() == 800);
  CHECK(s.valid.size() == 200);
  std::set<size_t> all(s.train.begin(), s.train.end());
  all.insert(s.valid.begin(), s.valid.end());
  CHECK(all.size() == 1000);
  CHECK(std::is_sorted(s.valid.begin(), s.valid.end()));
  CHECK(make_split(1000, o).train == s.train);
  o.seed = 6;
  CHECK(make_split(1000, o).train != s.train);
}

TEST_CASE("shuffle = false keeps the seed's first-80%-train layout, ranges and limits apply") {
  SplitOptions o;
  o.shuffle = false;
  Split s = make_split(10, o);
  CHECK(s.train == std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(s.valid == std::vector<size_t>{8, 9});
  o.train = {0, 4};
  o.valid = {6, 10};
  o.max_valid = 3;
  s = make_split(10, o);
  CHECK(s.train == std::vector<size_t>{0, 1, 2, 3});
  CHECK(s.valid == std::vector<size_t>{6, 7, 8});
  o.valid = {2, 12};
  CHECK_THROWS_AS(make_split(10, o), UserError);  // beyond the dataset
  o.valid = {2, 6};
  CHECK_THROWS_AS(make_split(10, o), UserError);  // overlaps train
}

// The indices fastai's RandomSplitter(valid_pct, seed) gives, computed once with Debian's
// python3-torch 1.13 (torch.manual_seed(seed); perm = torch.randperm(n); cut = int(valid_pct * n);
// train = perm[cut:], valid = perm[:cut]); only the numbers are kept here.
TEST_CASE("style = fastai reproduces fastai's RandomSplitter exactly (golden from PyTorch)") {
  auto fastai = [](size_t n, double pct, int64_t seed) {
    SplitOptions o;
    o.style = "fastai";
    o.valid_fraction = pct;
    o.seed = seed;
    return make_split(n, o);
  };
  Split s = fastai(10, 0.2, 42);
  CHECK(s.train == std::vector<size_t>{1, 8, 4, 5, 0, 9, 3, 7});
  CHECK(s.valid == std::vector<size_t>{2, 6});
  s = fastai(25, 0.3, 0);  // int(7.5) = 7
  CHECK(s.train == std::vector<size_t>{8, 14, 12, 21, 2, 15, 1, 22, 10, 13, 9, 7, 18, 3, 4, 20, 23, 0});
  CHECK(s.valid == std::vector<size_t>{19, 16, 6, 17, 5, 24, 11});
  s = fastai(7, 0.5, 123);
  CHECK(s.train == std::vector<size_t>{5, 3, 1, 6});
  CHECK(s.valid == std::vector<size_t>{2, 0, 4});
  CHECK(fastai(100, 0.29, 1).valid.size() == 28);  // int(28.999999999999996), as Python truncates

  // Sizes of real sets: MNIST train.csv (8,000) and Oxford Pets (7,390 images), first and last
  // indices and a position-weighted sum of each side (sum of (k + 1) * index).
  auto weighted = [](const std::vector<size_t>& v) {
    uint64_t sum = 0;
    for (size_t k = 0; k < v.size(); ++k) sum += (k + 1) * v[k];
    return sum;
  };
  auto head = [](const std::vector<size_t>& v, size_t k) { return std::vector<size_t>(v.begin(), v.begin() + k); };
  auto tail = [](const std::vector<size_t>& v, size_t k) { return std::vector<size_t>(v.end() - k, v.end()); };
  s = fastai(8000, 0.2, 42);
  REQUIRE(s.train.size() == 6400);
  REQUIRE(s.valid.size() == 1600);
  CHECK(head(s.valid, 8) == std::vector<size_t>{5542, 1762, 3954, 5968, 6758, 1615, 4484, 915});
  CHECK(tail(s.valid, 4) == std::vector<size_t>{4391, 4145, 4523, 6668});
  CHECK(head(s.train, 8) == std::vector<size_t>{1449, 4488, 2985, 5470, 4407, 6658, 5757, 2280});
  CHECK(tail(s.train, 4) == std::vector<size_t>{1360, 3024, 4351, 3317});
  CHECK(weighted(s.valid) == 5079131350ull);
  CHECK(weighted(s.train) == 81632412654ull);
  s = fastai(7390, 0.2, 42);
  REQUIRE(s.train.size() == 5912);
  REQUIRE(s.valid.size() == 1478);
  CHECK(head(s.valid, 8) == std::vector<size_t>{4512, 4290, 5770, 706, 2200, 4320, 6450, 501});
  CHECK(tail(s.valid, 4) == std::vector<size_t>{4249, 4040, 951, 41});
  CHECK(head(s.train, 8) == std::vector<size_t>{5643, 5317, 5806, 3460, 613, 5456, 2968, 3741});
  CHECK(tail(s.train, 4) == std::vector<size_t>{7115, 7095, 4654, 7194});
  CHECK(weighted(s.valid) == 4007738670ull);
  CHECK(weighted(s.train) == 64362544339ull);

  // The default style is unchanged by the new option (existing recipes keep their numbers).
  SplitOptions def;
  def.seed = 5;
  SplitOptions eng = def;
  eng.style = "engine";
  CHECK(make_split(1000, def).train == make_split(1000, eng).train);
  CHECK(make_split(1000, def).train != fastai(1000, 0.2, 5).train);
}
