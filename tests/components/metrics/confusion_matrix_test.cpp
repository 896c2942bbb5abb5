#include "components/metrics/confusion_matrix.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/errors.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

using namespace engine;

using engine::test::read_text;

namespace {
// The accuracy test's batch with a 4th class that never occurs:
//   targets 2 0 0 1 2 2, predictions 2 0 1 1 0 2.
// counts[true][pred] (checked against scikit-learn's confusion_matrix(labels=[0, 1, 2, 3])):
//   true 0: 1 1 0 0      support 2, recall 1/2
//   true 1: 0 1 0 0      support 1, recall 1
//   true 2: 1 0 2 0      support 3, recall 2/3
//   true 3: 0 0 0 0      support 0, recall undefined
//   predicted 2 2 2 0 -> precision 1/2, 1/2, 1, undefined
torch::Tensor preds() { return torch::tensor({2, 0, 1, 1, 0, 2}, torch::kLong); }
torch::Tensor targets() { return torch::tensor({2, 0, 0, 1, 2, 2}, torch::kLong); }

}  // namespace

TEST_CASE("confusion matrix counts, precision, recall and support on a known batch") {
  ConfusionMatrix cm(4);
  cm.update(preds(), targets());
  const double expected[4][4] = {{1, 1, 0, 0}, {0, 1, 0, 0}, {1, 0, 2, 0}, {0, 0, 0, 0}};
  for (int t = 0; t < 4; ++t)
    for (int p = 0; p < 4; ++p) CHECK(cm.counts(t, p) == expected[t][p]);
  CHECK(cm.support(0) == 2);
  CHECK(cm.support(2) == 3);
  CHECK(cm.predicted(1) == 2);
  CHECK(cm.total() == 6);
  CHECK(cm.precision(0) == 0.5);
  CHECK(cm.precision(2) == 1.0);
  CHECK(cm.recall(0) == 0.5);
  CHECK(cm.recall(1) == 1.0);
  CHECK(cm.recall(2) == doctest::Approx(2.0 / 3));
  CHECK(cm.f1(2) == doctest::Approx(0.8));
  CHECK(std::isnan(cm.precision(3)));
  CHECK(std::isnan(cm.recall(3)));
  CHECK(cm.accuracy() == doctest::Approx(4.0 / 6));
  CHECK_THROWS_AS(cm.counts(4, 0), std::out_of_range);

  cm.reset();
  CHECK(cm.total() == 0);
  CHECK(std::isnan(cm.accuracy()));
}

TEST_CASE("confusion matrix sums of two ranks and an empty rank equal the single-rank matrix") {
  ConfusionMatrix rank0(4), rank1(4), empty_rank(4), whole(4), reduced(4);
  rank0.update(preds().slice(0, 0, 2), targets().slice(0, 0, 2));
  rank1.update(preds().slice(0, 2, 6).to(torch::kInt), targets().slice(0, 2, 6).to(torch::kInt));
  empty_rank.update(torch::empty({0}, torch::kLong), torch::empty({0}, torch::kLong));
  whole.update(preds(), targets());
  std::vector<double> sum(16, 0.0);
  for (auto* m : {&rank0, &rank1, &empty_rank}) {
    REQUIRE(m->sums().size() == 16);
    for (size_t i = 0; i < 16; ++i) sum[i] += m->sums()[i];
  }
  reduced.set_sums(sum);
  CHECK(reduced.sums() == whole.sums());
  CHECK(reduced.recall(2) == whole.recall(2));
  CHECK_THROWS_AS(reduced.set_sums({1, 2}), std::invalid_argument);
}

TEST_CASE("confusion matrix refuses bad input") {
  CHECK_THROWS_AS(ConfusionMatrix(0), std::invalid_argument);
  ConfusionMatrix cm(3);
  CHECK_THROWS_AS(cm.update(preds(), targets().slice(0, 0, 5)), std::invalid_argument);
  CHECK_THROWS_AS(cm.update(torch::tensor({0}, torch::kLong), torch::tensor({3}, torch::kLong)), UserError);
  CHECK_THROWS_AS(cm.update(torch::tensor({-1}, torch::kLong), torch::tensor({0}, torch::kLong)), UserError);
  CHECK(cm.total() == 0);  // a refused batch adds nothing
  CHECK_THROWS_AS(cm.to_csv({"a", "b"}), std::invalid_argument);
}

TEST_CASE("confusion matrix writes a CSV and a JSON twin a report can read") {
  std::string dir = engine::test::temp_dir("confusion_matrix");
  ConfusionMatrix cm(4);
  cm.update(preds(), targets());
  const std::vector<std::string> names{"cat", "dog", "a,b", "d\"q"};
  cm.write(dir + "/confusion.csv", names);

  CHECK(read_text(dir + "/confusion.csv") ==
        "true\\pred,cat,dog,\"a,b\",\"d\"\"q\"\n"
        "cat,1,1,0,0\n"
        "dog,0,1,0,0\n"
        "\"a,b\",1,0,2,0\n"
        "\"d\"\"q\",0,0,0,0\n");
  CHECK(ConfusionMatrix::json_path(dir + "/confusion.csv") == dir + "/confusion.json");
  CHECK(ConfusionMatrix::json_path("cm") == "cm.json");
  CHECK_FALSE(std::filesystem::exists(dir + "/confusion.csv.tmp"));

  auto j = nlohmann::json::parse(read_text(dir + "/confusion.json"));
  CHECK(j["num_classes"] == 4);
  CHECK(j["total"] == 6);
  CHECK(j["accuracy"].get<double>() == doctest::Approx(4.0 / 6));
  CHECK(j["class_names"][2] == "a,b");
  CHECK(j["counts"][2] == nlohmann::json::array({1, 0, 2, 0}));
  const auto& c2 = j["per_class"][2];
  CHECK(c2["class"] == 2);
  CHECK(c2["name"] == "a,b");
  CHECK(c2["support"] == 3);
  CHECK(c2["predicted"] == 2);
  CHECK(c2["correct"] == 2);
  CHECK(c2["precision"].get<double>() == 1.0);
  CHECK(c2["recall"].get<double>() == doctest::Approx(2.0 / 3));
  CHECK(c2["f1"].get<double>() == doctest::Approx(0.8));
  // The class that never occurs: undefined ratios are null, not 0 and not NaN (invalid JSON).
  CHECK(j["per_class"][3]["precision"].is_null());
  CHECK(j["per_class"][3]["recall"].is_null());
  CHECK(j["per_class"][3]["support"] == 0);

  // Without names the classes are their indices.
  CHECK(cm.to_csv().rfind("true\\pred,0,1,2,3\n0,1,1,0,0\n", 0) == 0);
}
