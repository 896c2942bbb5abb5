#pragma once
// one_cycle: fastai's fit_one_cycle, per optimizer step, lr_max being the optimizer's lr.
//   pos = step / total                                     (fastai's pct_train: 0 at the first step)
//   pos <  pct_start: lr = SchedCos(lr_max / div, lr_max)(pos / pct_start)
//   pos >= pct_start: lr = SchedCos(lr_max, lr_max / div_final)((pos - pct_start) / (1 - pct_start))
//   momentum: the same two phases from moms[0] to moms[1], then moms[1] to moms[2]
// with SchedCos(a, b)(x) = a + (1 + cos(pi * (1 - x))) * (b - a) / 2 (fastai's combined_cos).
// So step 0 has lr_max / div, the step at pos = pct_start has lr_max, and the last step is just
// above lr_max / div_final (pos never reaches 1, exactly as in fastai).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "components/schedulers/scheduler.h"
#include "engine/recipe/options.h"

namespace engine {

struct OneCycleOptions {
  double div = 25.0;                           // initial lr = lr_max / div, > 0
  double div_final = 1e5;                      // final lr = lr_max / div_final, > 0
  double pct_start = 0.25;                     // fraction of steps spent warming up, in [0, 1]
  std::vector<double> moms{0.95, 0.85, 0.95};  // momentum start, middle, end; [] = leave alone
};

OneCycleOptions read_one_cycle_options(Options& o);

class OneCycleScheduler : public Scheduler {
 public:
  explicit OneCycleScheduler(OneCycleOptions options) : options_(std::move(options)) {}
  double lr(int64_t step, int64_t total, double base_lr) const override;
  std::optional<double> momentum(int64_t step, int64_t total) const override;

 private:
  /// fastai's combined_cos(pct_start, start, middle, end) at `pos` in [0, 1).
  double combined_cos(double start, double middle, double end, double pos) const;
  OneCycleOptions options_;
};

void register_one_cycle(SchedulerRegistry& registry);

}  // namespace engine
