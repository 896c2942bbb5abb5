#pragma once
// f1_macro: the unweighted mean over classes of per-class F1 = 2 tp / (2 tp + fp + fn), with the
// prediction of a sample its arg-max logit (ties to the lowest index, as in accuracy).
//
// Which classes are averaged: exactly those that occur in the targets or in the predictions of the
// evaluated data (tp + fp + fn > 0), i.e. scikit-learn's
//     f1_score(y_true, y_pred, average="macro", zero_division=0)
// with its default labels = the sorted union of the labels present in y_true and y_pred. A class
// that is predicted but never a target (or the reverse) is averaged with F1 = 0; a class that
// appears in neither is left out, so a validation split that lacks a class is not penalised for it.
// No samples at all: NaN.
//
// Sums are per class: {tp[0..C), fp[0..C), fn[0..C)}, 3 * num_classes counts. That is why
// reset(num_classes) must be called before update(): every rank, even one with no samples,
// contributes 3 * num_classes values to the all-reduce. The union of present classes over ranks
// is then exactly the union over the whole data.
#include <cstdint>
#include <string>
#include <vector>

#include "components/metrics/metric.h"

namespace engine {

class F1Macro : public Metric {
 public:
  std::string name() const override { return "f1_macro"; }
  bool higher_is_better() const override { return true; }
  /// logits [N, num_classes], targets [N] in [0, num_classes) (else UserError). Throws
  /// std::logic_error before the first reset(num_classes).
  void update(const torch::Tensor& logits, const torch::Tensor& targets) override;
  /// {tp[0..C), fp[0..C), fn[0..C)}: 3 * num_classes values (empty before reset).
  std::vector<double> sums() const override { return sums_; }
  void set_sums(const std::vector<double>& sums) override;
  double compute() const override;
  void reset(int64_t num_classes) override;

  /// Classes that compute() averages (present in targets or predictions), ascending.
  std::vector<int64_t> averaged_classes() const;

 private:
  int64_t num_classes_ = 0;
  std::vector<double> sums_;
};

void register_f1_macro(MetricRegistry& registry);

}  // namespace engine
