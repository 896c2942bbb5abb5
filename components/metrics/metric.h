#pragma once
// Contract of every metric: computed from sums, never from averaged means (STYLE.md habit 9).
// - reset(num_classes) starts an evaluation. It is called before every evaluation on every rank,
//   with the model's class count, so that metrics whose sums are per class (f1_macro) size them
//   the same on each rank, including a rank whose shard is empty and never sees a logit.
// - update() adds one batch of (logits [N, C], targets [N] int64) to the running sums.
// - sums() are what ranks all-reduce (SUM) before compute(); set_sums() loads the reduced values.
//   sums().size() depends only on the options and on num_classes, never on the data, so every
//   rank contributes the same number of values. Sharded evaluation counts every sample once,
//   whatever the world size.
// - compute() with no samples is NaN: "no data" must not read as 0 % or 100 % in a report.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;
  virtual bool higher_is_better() const = 0;
  virtual void update(const torch::Tensor& logits, const torch::Tensor& targets) = 0;
  virtual std::vector<double> sums() const = 0;
  virtual void set_sums(const std::vector<double>& sums) = 0;
  virtual double compute() const = 0;
  /// Clears the sums for an evaluation over `num_classes` classes (> 0; the model's logit count).
  /// Throws std::invalid_argument for num_classes < 1.
  virtual void reset(int64_t num_classes) = 0;
};

using MetricRegistry = Registry<Metric>;

void register_metrics(MetricRegistry& registry);

/// Shared shape check of update(): logits [N, C] with C == num_classes when num_classes > 0 (0 =
/// reset() not called yet: no check), targets [N]. Throws std::invalid_argument naming `metric`.
void check_metric_batch(const std::string& metric, const torch::Tensor& logits, const torch::Tensor& targets,
                        int64_t num_classes);
/// Throws std::invalid_argument naming `metric` unless num_classes >= 1.
void check_num_classes(const std::string& metric, int64_t num_classes);
/// Throws UserError naming `what` and the first offending label unless every value of `labels`
/// (an integer tensor) lies in [0, num_classes): a dataset with more classes than the model.
void check_labels_in_range(const std::string& what, const torch::Tensor& labels, int64_t num_classes);

}  // namespace engine
