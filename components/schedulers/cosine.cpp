#include "components/schedulers/cosine.h"

#include <algorithm>
#include <cmath>

#include "components/schedulers/schedule_math.h"

namespace engine {

CosineOptions read_cosine_options(Options& o) {
  CosineOptions r;
  r.warmup_steps =
      o.integer("warmup_steps", r.warmup_steps, "linear warmup over this many optimizer steps", 0);
  r.warmup_fraction =
      o.number("warmup_fraction", r.warmup_fraction, "warmup as a fraction of all steps, in [0, 1)", 0.0);
  if (r.warmup_fraction >= 1) {
    o.error("warmup_fraction",
            "value " + std::to_string(r.warmup_fraction) + " is out of range, expected < 1", "typical: 0.05");
    r.warmup_fraction = 0;
  }
  // Both set is ambiguous; say so rather than pick one silently.
  if (r.warmup_steps > 0 && r.warmup_fraction > 0)
    o.error("warmup_fraction", "set either warmup_steps or warmup_fraction, not both");
  r.min_lr_fraction = o.number("min_lr_fraction", r.min_lr_fraction,
                               "final lr as a fraction of the base lr, in [0, 1]", 0.0, 1.0);
  return r;
}

int64_t CosineScheduler::warmup_steps(int64_t total) const {
  int64_t w = options_.warmup_steps > 0
                  ? options_.warmup_steps
                  : static_cast<int64_t>(std::llround(options_.warmup_fraction * total));
  return std::clamp<int64_t>(w, 0, std::max<int64_t>(total, 0));
}

double CosineScheduler::lr(int64_t step, int64_t total, double base_lr) const {
  int64_t w = warmup_steps(total);
  if (step < w) return base_lr * sched::warmup_factor(step, w);
  // The last step (total - 1) lands exactly on the floor; a one-step decay (or a warmup that ends
  // at the last step) has nothing to anneal over and stays at base.
  int64_t span = total - 1 - w;
  if (span <= 0) return base_lr;
  double pos = std::min(1.0, static_cast<double>(step - w) / static_cast<double>(span));
  double f = options_.min_lr_fraction;
  return base_lr * (f + (1 - f) * (1 + std::cos(sched::kPi * pos)) / 2);
}

void register_cosine(SchedulerRegistry& registry) {
  registry.add("cosine", "linear warmup, then cosine decay to lr * min_lr_fraction",
               [](Options& o) -> SchedulerRegistry::Factory {
                 CosineOptions options = read_cosine_options(o);
                 return [options]() { return std::make_unique<CosineScheduler>(options); };
               });
}

}  // namespace engine
