#pragma once
// cosine: linear warmup, then half a cosine from the optimizer's lr down to lr * min_lr_fraction
// at the last step. With W warmup steps and `total` steps (0-based step):
//   step < W:  lr = base * (step + 1) / W                  (base reached at step W - 1)
//   else:      pos = (step - W) / (total - 1 - W)          (0 at step W, 1 at the last step)
//              lr  = base * (f + (1 - f) * (1 + cos(pi * pos)) / 2),  f = min_lr_fraction
// W = warmup_steps, or round(warmup_fraction * total) when warmup_fraction is set instead.
// Momentum is left alone.
#include <cstdint>
#include <memory>

#include "components/schedulers/scheduler.h"
#include "engine/recipe/options.h"

namespace engine {

struct CosineOptions {
  int64_t warmup_steps = 0;      // optimizer steps of linear warmup (exclusive with warmup_fraction)
  double warmup_fraction = 0.0;  // warmup as a fraction of all steps, in [0, 1)
  double min_lr_fraction = 0.0;  // final lr = base * min_lr_fraction, in [0, 1]
};

CosineOptions read_cosine_options(Options& o);

class CosineScheduler : public Scheduler {
 public:
  explicit CosineScheduler(CosineOptions options) : options_(options) {}
  double lr(int64_t step, int64_t total, double base_lr) const override;
  /// The warmup length used for a run of `total` steps.
  int64_t warmup_steps(int64_t total) const;

 private:
  CosineOptions options_;
};

void register_cosine(SchedulerRegistry& registry);

}  // namespace engine
