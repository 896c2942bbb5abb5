#include "components/metrics/accuracy.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>

#include "components/metrics/all.h"
#include "components/metrics/error_rate.h"

using namespace engine;

namespace {
// 6 samples, 3 classes; predictions 2, 0, 1, 1, 0, 2.
torch::Tensor logits() {
  return torch::tensor({{0.1f, 0.2f, 0.9f},
                        {2.0f, -1.0f, 0.5f},
                        {0.0f, 3.0f, 1.0f},
                        {-2.0f, 0.5f, 0.4f},
                        {1.0f, 0.0f, 0.0f},
                        {0.3f, 0.2f, 0.31f}});
}
torch::Tensor targets() { return torch::tensor({2, 0, 0, 1, 2, 2}, torch::kLong); }  // 4 of 6 right
}  // namespace

TEST_CASE("accuracy and error_rate on a known batch, fp32 and bf16 logits") {
  Accuracy acc;
  ErrorRate err;
  acc.update(logits(), targets());
  err.update(logits(), targets());
  CHECK(acc.compute() == doctest::Approx(4.0 / 6));
  CHECK(err.compute() == doctest::Approx(1 - acc.compute()));
  CHECK(acc.sums() == std::vector<double>{4, 6});
  CHECK(acc.higher_is_better());
  CHECK_FALSE(err.higher_is_better());
  CHECK(acc.name() == "accuracy");
  CHECK(err.name() == "error_rate");

  Accuracy bf;
  bf.update(logits().to(torch::kBFloat16), targets());
  bf.update(logits().to(torch::kDouble), targets().to(torch::kInt));
  CHECK(bf.sums() == std::vector<double>{8, 12});

  acc.reset(3);
  CHECK(std::isnan(acc.compute()));
  CHECK(acc.sums() == std::vector<double>{0, 0});
  acc.update(logits(), targets());
  CHECK(acc.compute() == doctest::Approx(4.0 / 6));
  // After reset(num_classes) the logits' width is checked: 3 logits are not 4 classes.
  acc.reset(4);
  CHECK_THROWS_AS(acc.update(logits(), targets()), std::invalid_argument);
  CHECK_THROWS_AS(acc.reset(0), std::invalid_argument);
  CHECK(std::isnan(ErrorRate().compute()));
  CHECK_THROWS_AS(acc.update(logits(), torch::tensor({1, 2}, torch::kLong)), std::invalid_argument);
  CHECK_THROWS_AS(acc.update(logits()[0], targets()), std::invalid_argument);
}

TEST_CASE("accuracy from summed counts of two ranks equals accuracy on the concatenated batch") {
  auto l = logits(), t = targets();
  Accuracy rank0, rank1, whole, reduced;
  rank0.update(l.slice(0, 0, 4), t.slice(0, 0, 4));  // unequal shards, as the last batch can be
  rank1.update(l.slice(0, 4, 6), t.slice(0, 4, 6));
  whole.update(l, t);
  auto s0 = rank0.sums(), s1 = rank1.sums();
  std::vector<double> sum(s0.size());
  for (size_t i = 0; i < s0.size(); ++i) sum[i] = s0[i] + s1[i];  // what an all-reduce SUM does
  reduced.set_sums(sum);
  CHECK(reduced.compute() == whole.compute());
  ErrorRate err;
  err.set_sums(sum);
  CHECK(err.compute() == doctest::Approx(1 - whole.compute()));
  CHECK_THROWS_AS(err.set_sums({1.0}), std::invalid_argument);
}

TEST_CASE("the metric registry knows every metric") {
  MetricRegistry registry("metric");
  register_metrics(registry);
  CHECK(registry.names() == std::vector<std::string>{"accuracy", "error_rate", "f1_macro", "top_k_accuracy"});
  std::vector<OptionDoc> docs;
  Options o = Options::describe(&docs);
  auto factory = registry.find("error_rate")->parse(o);
  REQUIRE(factory);
  auto m = factory();
  CHECK(m->name() == "error_rate");
  CHECK_FALSE(m->higher_is_better());
  for (const auto& name : registry.names()) {
    Options d = Options::describe(nullptr);
    auto made = registry.find(name)->parse(d)();
    CHECK(made->name() == name);  // the recipe's name is the key in metrics.jsonl ("valid/<name>")
  }
}
