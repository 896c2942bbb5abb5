#pragma once
// Contract of every scheduler: a pure function of the optimizer step, stepped once per optimizer
// step (never per rank, never on a skipped fp16 step). Being stateless, it resumes exactly from a
// saved step count.
#include <cstdint>
#include <optional>

#include "engine/registry/registry.h"

namespace engine {

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  /// Learning rate at 0-based optimizer step `step` of `total` steps, given the optimizer's lr.
  virtual double lr(int64_t step, int64_t total, double base_lr) const = 0;
  /// Momentum (SGD momentum / Adam beta1) at that step, or nullopt to leave it alone.
  virtual std::optional<double> momentum(int64_t step, int64_t total) const { return std::nullopt; }
};

using SchedulerRegistry = Registry<Scheduler>;

void register_schedulers(SchedulerRegistry& registry);

}  // namespace engine
