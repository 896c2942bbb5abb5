#include "components/metrics/error_rate.h"

#include <limits>

namespace engine {

// Computed from the counts rather than as 1 - Accuracy::compute() so that it is the exact
// complement (wrong / total), not a difference of two rounded values.
double ErrorRate::compute() const {
  if (total_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return (total_ - correct_) / total_;
}

void register_error_rate(MetricRegistry& registry) {
  registry.add(
      "error_rate", "1 - accuracy (fastai's error_rate; NaN with no samples)",
      [](Options&) -> MetricRegistry::Factory { return []() { return std::make_unique<ErrorRate>(); }; });
}

}  // namespace engine
