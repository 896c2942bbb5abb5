#include "components/metrics/f1_macro.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>

#include "engine/core/errors.h"

using namespace engine;

// Golden values: scikit-learn 1.2.1,
//   f1_score(targets, predictions, average="macro", zero_division=0)
// run once on the cases below; only the numbers are kept here.

namespace {
// Logits whose arg-max is `preds`: one-hot rows.
torch::Tensor logits_for(const std::vector<int64_t>& preds, int64_t classes) {
  return torch::one_hot(torch::tensor(preds, torch::kLong), classes).to(torch::kFloat);
}
double f1(const std::vector<int64_t>& targets, const std::vector<int64_t>& preds, int64_t classes) {
  F1Macro m;
  m.reset(classes);
  m.update(logits_for(preds, classes), torch::tensor(targets, torch::kLong));
  return m.compute();
}
// 9 samples, 6 classes. Per class (tp, fp, fn) -> F1:
//   0: (1, 1, 2) -> 0.4     1: (1, 1, 1) -> 0.5     2: absent from both -> not averaged
//   3: (2, 1, 1) -> 2/3     4: (0, 2, 0) -> 0 (predicted, never a target)
//   5: (0, 0, 1) -> 0 (a target, never predicted)
// macro = (0.4 + 0.5 + 2/3 + 0 + 0) / 5; dividing by 6 instead would give 0.2611.
const std::vector<int64_t> kTargets{0, 0, 1, 1, 3, 3, 3, 0, 5};
const std::vector<int64_t> kPreds{0, 1, 1, 4, 3, 3, 0, 4, 3};
}  // namespace

TEST_CASE("f1_macro matches scikit-learn's macro F1 (zero_division=0)") {
  // The accuracy test's batch: per class F1 0.5, 2/3, 0.8.
  CHECK(f1({2, 0, 0, 1, 2, 2}, {2, 0, 1, 1, 0, 2}, 3) == doctest::Approx(0.6555555555555556).epsilon(1e-12));
  CHECK(f1(kTargets, kPreds, 6) == doctest::Approx(0.31333333333333335).epsilon(1e-12));
  CHECK(f1({0, 1}, {1, 0}, 2) == 0.0);
  CHECK(f1({3, 3, 3}, {3, 3, 3}, 5) == 1.0);  // classes 0, 1, 2, 4 absent: not averaged

  F1Macro m;
  m.reset(6);
  m.update(logits_for(kPreds, 6), torch::tensor(kTargets, torch::kLong));
  CHECK(m.averaged_classes() == std::vector<int64_t>{0, 1, 3, 4, 5});
  // {tp[6], fp[6], fn[6]}
  CHECK(m.sums() == std::vector<double>{1, 1, 0, 2, 0, 0,  //
                                        1, 1, 0, 1, 2, 0,  //
                                        2, 1, 0, 1, 0, 1});
  CHECK(m.name() == "f1_macro");
  CHECK(m.higher_is_better());
}

TEST_CASE("f1_macro sums of two ranks and an empty rank reduce to the single-rank value") {
  auto l = logits_for(kPreds, 6);
  auto t = torch::tensor(kTargets, torch::kLong);
  F1Macro rank0, rank1, empty_rank, whole, reduced;
  for (auto* m : {&rank0, &rank1, &empty_rank, &whole, &reduced}) m->reset(6);
  rank0.update(l.slice(0, 0, 4), t.slice(0, 0, 4));  // rank 0 sees no class 3, 4 or 5 target
  rank1.update(l.slice(0, 4, 9), t.slice(0, 4, 9));
  whole.update(l.slice(0, 0, 5), t.slice(0, 0, 5));  // the whole batch in two updates
  whole.update(l.slice(0, 5, 9), t.slice(0, 5, 9));
  // A rank with an empty shard never calls update, yet contributes as many sums as the others.
  REQUIRE(empty_rank.sums().size() == 18);
  std::vector<double> sum(18, 0.0);
  for (auto* m : {&rank0, &rank1, &empty_rank}) {
    REQUIRE(m->sums().size() == 18);
    for (size_t i = 0; i < 18; ++i) sum[i] += m->sums()[i];
  }
  reduced.set_sums(sum);
  CHECK(reduced.sums() == whole.sums());
  CHECK(reduced.compute() == whole.compute());
  CHECK(whole.compute() == doctest::Approx(0.31333333333333335).epsilon(1e-12));
  CHECK(std::isnan(empty_rank.compute()));
  CHECK_THROWS_AS(reduced.set_sums({1, 2, 3}), std::invalid_argument);
}

TEST_CASE("f1_macro refuses update before reset, wrong widths and out-of-range labels") {
  F1Macro m;
  CHECK(m.sums().empty());
  CHECK_THROWS_AS(m.update(logits_for({0}, 3), torch::tensor({0}, torch::kLong)), std::logic_error);
  m.reset(3);
  CHECK_THROWS_AS(m.update(logits_for({0}, 4), torch::tensor({0}, torch::kLong)), std::invalid_argument);
  CHECK_THROWS_AS(m.update(logits_for({0, 1}, 3), torch::tensor({0, 3}, torch::kLong)), UserError);
  CHECK_THROWS_AS(m.reset(0), std::invalid_argument);
  // reset() clears: a new evaluation does not inherit the previous one's counts.
  m.reset(3);
  m.update(logits_for({0, 1}, 3), torch::tensor({0, 1}, torch::kLong));
  m.reset(3);
  CHECK(std::isnan(m.compute()));
  CHECK(m.sums() == std::vector<double>(9, 0.0));
}
