#pragma once
// accuracy: fraction of samples whose arg-max logit is the target class.
// Sums are {correct, total} (counts, exact in a double up to 2^53 samples), so the value after
// an all-reduce of sums() over ranks equals the value on the concatenated data.
// compute() with no samples is NaN: "no data" must not read as 0 % or 100 % in a report.
// Ties in the logits go to the lowest class index (torch::argmax).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "components/metrics/metric.h"
#include "engine/recipe/options.h"

namespace engine {

class Accuracy : public Metric {
 public:
  std::string name() const override { return "accuracy"; }
  bool higher_is_better() const override { return true; }
  /// logits [N, C] of any floating dtype (bf16 included), targets [N] of an integer dtype, on any
  /// device. Throws std::invalid_argument on mismatched shapes (C is checked against reset()'s
  /// num_classes once reset has been called).
  void update(const torch::Tensor& logits, const torch::Tensor& targets) override;
  /// {correct, total}
  std::vector<double> sums() const override { return {correct_, total_}; }
  void set_sums(const std::vector<double>& sums) override;
  double compute() const override;
  /// The sums do not depend on num_classes; it is kept to check the logits' width.
  void reset(int64_t num_classes) override;

 protected:
  double correct_ = 0;
  double total_ = 0;
  int64_t num_classes_ = 0;  // 0 until reset(): no width check
};

void register_accuracy(MetricRegistry& registry);

}  // namespace engine
