#include "components/metrics/accuracy.h"

#include <limits>
#include <stdexcept>

namespace engine {

void Accuracy::update(const torch::Tensor& logits, const torch::Tensor& targets) {
  check_metric_batch(name(), logits, targets, num_classes_);
  if (logits.size(0) == 0) return;
  torch::NoGradGuard no_grad;
  // argmax in the logits' own dtype: converting to fp32 cannot change which index is largest, and
  // bf16 argmax is supported on CPU and CUDA. One .item() per batch is the only sync point.
  torch::Tensor pred = logits.detach().argmax(1);
  int64_t hits = pred.eq(targets.to(pred.device(), torch::kLong)).sum().item<int64_t>();
  correct_ += static_cast<double>(hits);
  total_ += static_cast<double>(targets.size(0));
}

void Accuracy::set_sums(const std::vector<double>& sums) {
  if (sums.size() != 2)
    throw std::invalid_argument(name() + ": set_sums expects {correct, total}, got " +
                                std::to_string(sums.size()) + " values");
  correct_ = sums[0];
  total_ = sums[1];
}

void Accuracy::reset(int64_t num_classes) {
  check_num_classes(name(), num_classes);
  num_classes_ = num_classes;
  correct_ = total_ = 0;
}

double Accuracy::compute() const {
  if (total_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return correct_ / total_;
}

void register_accuracy(MetricRegistry& registry) {
  registry.add(
      "accuracy", "fraction of samples whose top-1 prediction is the target (NaN with no samples)",
      [](Options&) -> MetricRegistry::Factory { return []() { return std::make_unique<Accuracy>(); }; });
}

}  // namespace engine
