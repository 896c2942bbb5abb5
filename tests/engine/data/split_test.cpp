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

TEST_CASE("shuffle = false keeps the seed's first-80%-train layout; ranges and limits apply") {
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
