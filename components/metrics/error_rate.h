#pragma once
// error_rate: 1 - accuracy (fastai's error_rate), from the same {correct, total} sums, so ranks
// reduce it exactly like accuracy. NaN with no samples; lower is better.
#include <string>

#include "components/metrics/accuracy.h"

namespace engine {

class ErrorRate : public Accuracy {
 public:
  std::string name() const override { return "error_rate"; }
  bool higher_is_better() const override { return false; }
  double compute() const override;
};

void register_error_rate(MetricRegistry& registry);

}  // namespace engine
