#include "components/metrics/top_k_accuracy.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "engine/core/errors.h"

using namespace engine;

namespace {
// 5 samples, 4 classes. The target's rank (larger logits, then equal logits of lower classes):
//   row 0: target 2, one larger logit (class 1)                      -> rank 1
//   row 1: all equal, target 3: classes 0, 1, 2 rank before it       -> rank 3
//   row 2: target 0 is the largest                                    -> rank 0
//   row 3: target 1, class 2 larger, class 0 equal and lower          -> rank 2
//   row 4: target 0 is the smallest                                   -> rank 3
// So top-1 = 1/5, top-2 = 2/5, top-3 = 3/5, top-4 = 5/5.
torch::Tensor ranked_logits() {
  return torch::tensor({{0.5f, 2.0f, 1.0f, -1.0f},
                        {1.0f, 1.0f, 1.0f, 1.0f},
                        {3.0f, 0.0f, 1.0f, 2.0f},
                        {0.0f, 0.0f, 5.0f, 0.0f},
                        {1.0f, 4.0f, 3.0f, 2.0f}});
}
torch::Tensor ranked_targets() { return torch::tensor({2, 3, 0, 1, 0}, torch::kLong); }

double top_k(int64_t k, const torch::Tensor& l = ranked_logits(), const torch::Tensor& t = ranked_targets()) {
  TopKAccuracy m({k});
  m.reset(l.size(1));
  m.update(l, t);
  return m.compute();
}
}  // namespace

TEST_CASE("top_k_accuracy counts the target's rank, ties to the lower class index") {
  CHECK(top_k(1) == doctest::Approx(1.0 / 5));
  CHECK(top_k(2) == doctest::Approx(2.0 / 5));
  CHECK(top_k(3) == doctest::Approx(3.0 / 5));
  CHECK(top_k(4) == 1.0);
  CHECK(top_k(10) == 1.0);  // k > classes counts as top-classes
  // bf16 logits (the values above are exact in bf16) give the same counts.
  CHECK(top_k(2, ranked_logits().to(torch::kBFloat16)) == doctest::Approx(2.0 / 5));

  TopKAccuracy m;
  CHECK(m.k() == 5);
  CHECK(m.name() == "top_k_accuracy");
  CHECK(m.higher_is_better());
  CHECK_THROWS_AS(TopKAccuracy({0}), std::invalid_argument);
}

TEST_CASE("top_k_accuracy with k = 1 equals accuracy, including ties") {
  // Row 1 (all equal) and row 3 (three zeros) are ties: argmax and the rank rule must agree.
  Accuracy acc;
  acc.update(ranked_logits(), ranked_targets());
  CHECK(top_k(1) == acc.compute());
  // Arg-max per row: 1, 0 (a 4-way tie), 0, 2, 1: targets 1, 0, 0, 0, 1 hit all rows but row 3.
  auto t2 = torch::tensor({1, 0, 0, 0, 1}, torch::kLong);
  Accuracy acc2;
  acc2.update(ranked_logits(), t2);
  CHECK(top_k(1, ranked_logits(), t2) == acc2.compute());
  CHECK(acc2.compute() == doctest::Approx(4.0 / 5));
}

TEST_CASE("top_k_accuracy: NaN target logit is a miss, labels out of range are a UserError") {
  auto l = ranked_logits();
  l[2][0] = std::numeric_limits<float>::quiet_NaN();  // row 2 was a hit at every k
  CHECK(top_k(4, l) == doctest::Approx(4.0 / 5));
  CHECK_THROWS_AS(top_k(2, ranked_logits(), torch::tensor({2, 3, 0, 1, 4}, torch::kLong)), UserError);
  TopKAccuracy m({2});
  m.reset(3);  // logits are 4 wide
  CHECK_THROWS_AS(m.update(ranked_logits(), ranked_targets()), std::invalid_argument);
}

TEST_CASE("top_k_accuracy from summed sums of two ranks equals the single-rank value") {
  auto l = ranked_logits(), t = ranked_targets();
  TopKAccuracy rank0({2}), rank1({2}), empty_rank({2}), whole({2}), reduced({2});
  for (auto* m : {&rank0, &rank1, &empty_rank, &whole, &reduced}) m->reset(4);
  rank0.update(l.slice(0, 0, 3), t.slice(0, 0, 3));
  rank1.update(l.slice(0, 3, 5), t.slice(0, 3, 5));
  empty_rank.update(l.slice(0, 0, 0), t.slice(0, 0, 0));
  whole.update(l, t);
  std::vector<double> sum(2, 0.0);
  for (auto* m : {&rank0, &rank1, &empty_rank}) {
    REQUIRE(m->sums().size() == 2);
    for (size_t i = 0; i < 2; ++i) sum[i] += m->sums()[i];
  }
  reduced.set_sums(sum);
  CHECK(reduced.compute() == whole.compute());
  CHECK(whole.sums() == std::vector<double>{2, 5});
  CHECK(std::isnan(empty_rank.compute()));
}
