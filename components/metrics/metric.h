#pragma once
// Contract of every metric: computed from sums, never from averaged means (STYLE.md habit 9).
// - update() adds one batch of (logits [N, C], targets [N] int64) to the running sums.
// - sums() are what ranks all-reduce (SUM) before compute(); set_sums() loads the reduced values.
//   So sharded evaluation counts every sample once, whatever the world size.
#include <torch/types.h>

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
  virtual void reset() = 0;
};

using MetricRegistry = Registry<Metric>;

void register_metrics(MetricRegistry& registry);

}  // namespace engine
