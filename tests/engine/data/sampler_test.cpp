#include "engine/data/sampler.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

using namespace engine;

namespace {
std::vector<size_t> range(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 100);  // dataset indices need not start at 0
  return v;
}
}  // namespace

TEST_CASE("train shards are disjoint, equal, cover each global batch, and reshuffle per epoch") {
  auto train = range(1003);
  for (int world : {1, 2, 3}) {
    std::vector<TrainShard> shards;
    for (int r = 0; r < world; ++r) shards.push_back(train_shard(train, 7, 0, 32, r, world, true));
    std::set<size_t> seen;
    for (const auto& s : shards) {
      CHECK(s.batches == 1003 / (32 * world));
      CHECK(s.indices.size() == static_cast<size_t>(s.batches * 32));
      for (auto i : s.indices) CHECK(seen.insert(i).second);  // disjoint
    }
  }
  auto e0 = train_shard(train, 7, 0, 32, 0, 1, true).indices;
  auto e1 = train_shard(train, 7, 1, 32, 0, 1, true).indices;
  CHECK(e0 != e1);
  CHECK(e0 == train_shard(train, 7, 0, 32, 0, 1, true).indices);  // (seed, epoch) fixes the order
}

TEST_CASE("N ranks x batch b see exactly the samples of 1 rank x batch N*b, step by step") {
  auto train = range(500);
  auto single = train_shard(train, 3, 2, 64, 0, 1, true);
  auto r0 = train_shard(train, 3, 2, 32, 0, 2, true);
  auto r1 = train_shard(train, 3, 2, 32, 1, 2, true);
  REQUIRE(single.batches == r0.batches);
  for (int64_t b = 0; b < single.batches; ++b) {
    std::multiset<size_t> one(single.indices.begin() + b * 64, single.indices.begin() + (b + 1) * 64);
    std::multiset<size_t> two(r0.indices.begin() + b * 32, r0.indices.begin() + (b + 1) * 32);
    two.insert(r1.indices.begin() + b * 32, r1.indices.begin() + (b + 1) * 32);
    CHECK(one == two);
  }
}

TEST_CASE("without drop_last every sample but at most world-1 is seen once per epoch") {
  auto train = range(101);
  std::set<size_t> seen;
  size_t total = 0;
  for (int r = 0; r < 3; ++r) {
    auto s = train_shard(train, 1, 0, 16, r, 3, false);
    CHECK(s.batches == 3);  // 101 = 2 x 48 + 5 -> a last step of 3 (5 trimmed to a multiple of 3)
    total += s.indices.size();
    seen.insert(s.indices.begin(), s.indices.end());
  }
  CHECK(total == 99);
  CHECK(seen.size() == 99);
}

TEST_CASE("eval shards are contiguous, unpadded and give back dataset order") {
  auto idx = range(10);
  for (int world : {1, 2, 3, 4}) {
    std::vector<size_t> joined;
    for (int r = 0; r < world; ++r) {
      auto s = eval_shard(idx, r, world);
      CHECK(s.size() >= 10 / world);
      CHECK(s.size() <= 10 / world + 1);
      joined.insert(joined.end(), s.begin(), s.end());
    }
    CHECK(joined == idx);
  }
}
