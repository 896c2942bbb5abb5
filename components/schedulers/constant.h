#pragma once
// constant: the optimizer's lr at every step, after an optional linear warmup.
//   step < warmup_steps:  lr = base_lr * (step + 1) / warmup_steps   (never 0; base at the last)
//   otherwise:            lr = base_lr
// Momentum is left alone.
#include <cstdint>
#include <memory>

#include "components/schedulers/scheduler.h"
#include "engine/recipe/options.h"

namespace engine {

struct ConstantOptions {
  int64_t warmup_steps = 0;  // optimizer steps of linear warmup; 0 = none
};

ConstantOptions read_constant_options(Options& o);

class ConstantScheduler : public Scheduler {
 public:
  explicit ConstantScheduler(ConstantOptions options) : options_(options) {}
  double lr(int64_t step, int64_t total, double base_lr) const override;

 private:
  ConstantOptions options_;
};

void register_constant(SchedulerRegistry& registry);

}  // namespace engine
