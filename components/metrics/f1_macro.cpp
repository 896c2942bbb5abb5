#include "components/metrics/f1_macro.h"

#include <limits>
#include <stdexcept>

namespace engine {

void F1Macro::reset(int64_t num_classes) {
  check_num_classes(name(), num_classes);
  num_classes_ = num_classes;
  sums_.assign(3 * num_classes, 0.0);
}

void F1Macro::update(const torch::Tensor& logits, const torch::Tensor& targets) {
  if (num_classes_ == 0)
    throw std::logic_error(name() + ": update() before reset(num_classes): the per-class sums are not sized");
  check_metric_batch(name(), logits, targets, num_classes_);
  if (logits.size(0) == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor pred = logits.detach().argmax(1);
  torch::Tensor t = targets.to(pred.device(), torch::kLong);
  check_labels_in_range(name(), t, num_classes_);
  // Three bincounts give every per-class count in one pass: tp from the correct samples' targets,
  // fp = predicted - tp, fn = actual - tp. One device -> host copy per batch.
  const int64_t c = num_classes_;
  torch::Tensor tp = t.masked_select(pred.eq(t)).bincount({}, c);
  torch::Tensor predicted = pred.bincount({}, c);
  torch::Tensor actual = t.bincount({}, c);
  torch::Tensor counts =
      torch::stack({tp, predicted - tp, actual - tp}).to(torch::kCPU, torch::kDouble).contiguous();
  const double* p = counts.data_ptr<double>();
  for (int64_t i = 0; i < 3 * c; ++i) sums_[i] += p[i];
}

void F1Macro::set_sums(const std::vector<double>& sums) {
  if (sums.size() != sums_.size())
    throw std::invalid_argument(name() + ": set_sums expects " + std::to_string(sums_.size()) +
                                " values ({tp, fp, fn} per class for num_classes = " +
                                std::to_string(num_classes_) + "), got " + std::to_string(sums.size()));
  sums_ = sums;
}

std::vector<int64_t> F1Macro::averaged_classes() const {
  std::vector<int64_t> out;
  const int64_t c = num_classes_;
  for (int64_t i = 0; i < c; ++i)
    if (sums_[i] + sums_[c + i] + sums_[2 * c + i] > 0) out.push_back(i);
  return out;
}

double F1Macro::compute() const {
  const int64_t c = num_classes_;
  std::vector<int64_t> classes = averaged_classes();
  if (classes.empty()) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  // 2tp / (2tp + fp + fn) equals scikit-learn's 2PR / (P + R) whenever tp > 0, and both are 0 when
  // tp == 0 (zero_division = 0); the denominator is > 0 for every averaged class.
  for (int64_t i : classes) {
    double tp = sums_[i], fp = sums_[c + i], fn = sums_[2 * c + i];
    total += 2 * tp / (2 * tp + fp + fn);
  }
  return total / static_cast<double>(classes.size());
}

void register_f1_macro(MetricRegistry& registry) {
  registry.add(
      "f1_macro",
      "mean per-class F1 over the classes present in targets or predictions (scikit-learn's "
      "average=\"macro\", zero_division=0; NaN with no samples)",
      [](Options&) -> MetricRegistry::Factory { return []() { return std::make_unique<F1Macro>(); }; });
}

}  // namespace engine
