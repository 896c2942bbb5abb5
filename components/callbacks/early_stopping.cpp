#include "components/callbacks/early_stopping.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "engine/core/text.h"
#include "engine/trainer/fit_context.h"

namespace engine {

EarlyStoppingOptions EarlyStoppingOptions::read(Options& o) {
  EarlyStoppingOptions e;
  e.monitor = Monitor::read(o, "valid/loss");
  e.patience = o.integer("patience", e.patience, "epochs without improvement before stopping", 1);
  e.min_delta = o.number("min_delta", e.min_delta, "smallest change that counts as an improvement", 0);
  return e;
}

namespace {

class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions o) : opts_(std::move(o)) {}
  bool main_process_only() const override { return false; }
  std::string monitored() const override { return opts_.monitor.key; }

  std::string state() const override { return exact_number(best_) + " " + std::to_string(waited_); }
  void load_state(FitContext&, const std::string& text) override {
    std::istringstream s(text);
    std::string best;
    s >> best >> waited_;
    best_ = std::stod(best);  // "nan" before the first epoch: stod reads it, operator>> does not
  }

  void on_epoch_end(FitContext& ctx, const EpochLog& log) override {
    // load_recipe() checked the key; a missing value here is a bug, never a silent stop.
    if (!log.has(opts_.monitor.key))
      throw std::logic_error("early_stopping: monitor \"" + opts_.monitor.key +
                             "\" is not among this epoch's values");
    const double v = log.get(opts_.monitor.key);
    if (opts_.monitor.improved(v, best_, opts_.min_delta)) {
      best_ = v;
      waited_ = 0;
    } else if (++waited_ >= opts_.patience) {
      ctx.state.stop = true;  // the trainer reports the early stop (this runs on every rank)
    }
  }

 private:
  EarlyStoppingOptions opts_;
  double best_ = NAN;
  int64_t waited_ = 0;
};

}  // namespace

void register_early_stopping(CallbackRegistry& registry) {
  registry.add("early_stopping", "stop when a monitored value stops improving", [](Options& o) {
    auto opts = EarlyStoppingOptions::read(o);
    return CallbackRegistry::Factory([opts] { return std::make_unique<EarlyStopping>(opts); });
  });
}

}  // namespace engine
