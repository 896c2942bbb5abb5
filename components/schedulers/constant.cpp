#include "components/schedulers/constant.h"

#include "components/schedulers/schedule_math.h"

namespace engine {

ConstantOptions read_constant_options(Options& o) {
  ConstantOptions r;
  r.warmup_steps =
      o.integer("warmup_steps", r.warmup_steps,
                "linear warmup over this many optimizer steps: lr = base * (step + 1) / warmup_steps", 0);
  return r;
}

double ConstantScheduler::lr(int64_t step, int64_t /*total*/, double base_lr) const {
  return base_lr * sched::warmup_factor(step, options_.warmup_steps);
}

void register_constant(SchedulerRegistry& registry) {
  registry.add("constant", "constant lr after an optional linear warmup",
               [](Options& o) -> SchedulerRegistry::Factory {
                 ConstantOptions options = read_constant_options(o);
                 return [options]() { return std::make_unique<ConstantScheduler>(options); };
               });
}

}  // namespace engine
