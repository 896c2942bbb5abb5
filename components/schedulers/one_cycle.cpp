#include "components/schedulers/one_cycle.h"

#include <algorithm>
#include <string>

#include "components/schedulers/schedule_math.h"

namespace engine {

namespace {
// Position in the run as fastai computes it: train_iter / (n_epoch * n_iter), where train_iter is
// the number of batches done *before* this one. Out-of-range steps are clamped so the function
// stays total (a resumed run never asks for them).
double run_position(int64_t step, int64_t total) {
  if (total <= 0) return 0.0;
  int64_t s = std::clamp<int64_t>(step, 0, total - 1);
  return static_cast<double>(s) / static_cast<double>(total);
}
}  // namespace

OneCycleOptions read_one_cycle_options(Options& o) {
  OneCycleOptions d;
  OneCycleOptions r;
  r.div = o.number("div", d.div, "initial lr = lr_max / div (fastai default 25)", 0.0);
  if (!(r.div > 0)) {
    o.error("div", "value must be > 0", "fastai's default is 25");
    r.div = d.div;
  }
  r.div_final = o.number("div_final", d.div_final, "final lr = lr_max / div_final (fastai default 1e5)", 0.0);
  if (!(r.div_final > 0)) {
    o.error("div_final", "value must be > 0", "fastai's default is 1e5");
    r.div_final = d.div_final;
  }
  r.pct_start =
      o.number("pct_start", d.pct_start, "fraction of the steps spent rising to lr_max, in [0, 1]", 0.0, 1.0);
  r.moms = o.numbers(
      "moms", d.moms,
      "[start, middle, end] momentum (SGD momentum / Adam beta1), each in [0, 1); [] = not scheduled");
  bool ok = r.moms.empty() || r.moms.size() == 3;
  for (double m : r.moms) ok = ok && m >= 0 && m < 1;
  if (!ok) {
    o.error("moms", "expected 3 values in [0, 1) (or [] to leave momentum alone)",
            "fastai: [0.95, 0.85, 0.95]");
    r.moms = d.moms;
  }
  return r;
}

double OneCycleScheduler::combined_cos(double start, double middle, double end, double pos) const {
  // fastai's combine_scheds picks the last phase whose start is <= pos; with pct_start = 0 the
  // first phase is empty and with pct_start = 1 the second is never reached (pos < 1).
  double pct = options_.pct_start;
  if (pos >= pct && pct < 1) return sched::cos_anneal(middle, end, (pos - pct) / (1 - pct));
  return sched::cos_anneal(start, middle, pos / pct);
}

double OneCycleScheduler::lr(int64_t step, int64_t total, double base_lr) const {
  return combined_cos(base_lr / options_.div, base_lr, base_lr / options_.div_final,
                      run_position(step, total));
}

std::optional<double> OneCycleScheduler::momentum(int64_t step, int64_t total) const {
  if (options_.moms.size() != 3) return std::nullopt;
  const auto& m = options_.moms;
  return combined_cos(m[0], m[1], m[2], run_position(step, total));
}

void register_one_cycle(SchedulerRegistry& registry) {
  registry.add("one_cycle", "fastai's fit_one_cycle: cosine lr warmup to lr_max and anneal, inverse momentum",
               [](Options& o) -> SchedulerRegistry::Factory {
                 OneCycleOptions options = read_one_cycle_options(o);
                 return [options]() { return std::make_unique<OneCycleScheduler>(options); };
               });
}

}  // namespace engine
