#include "components/callbacks/checkpoint_best.h"

#include <stdexcept>

#include "engine/trainer/fit_context.h"
#include "engine/trainer/model_ema.h"

namespace engine {

CheckpointBestOptions CheckpointBestOptions::read(Options& o) {
  CheckpointBestOptions c;
  c.monitor = Monitor::read(o, "valid/accuracy");
  return c;
}

namespace {

class CheckpointBest : public Callback {
 public:
  explicit CheckpointBest(CheckpointBestOptions o) : opts_(std::move(o)) {}
  std::string monitored() const override { return opts_.monitor.key; }

  void on_epoch_end(FitContext& ctx, const EpochLog& log) override {
    if (!log.has(opts_.monitor.key))  // load_recipe() checked the key: this is a bug
      throw std::logic_error("checkpoint_best: monitor \"" + opts_.monitor.key + "\" is not among this run's values");
    const double v = log.get(opts_.monitor.key);
    if (opts_.monitor.improved(v, ctx.state.best_value)) {
      ctx.state.best_value = v;
      ctx.state.best_epoch = log.epoch;
      // A monitor on the EMA weights keeps the EMA weights.
      auto save = [&] { ctx.checkpointer.save_best(ctx.model, ctx.state, {{"monitor", opts_.monitor.key}}); };
      if (ctx.ema && opts_.monitor.key.rfind("valid_ema/", 0) == 0) ctx.ema->with_weights(ctx.model, save);
      else save();
    }
  }

 private:
  CheckpointBestOptions opts_;
};

}  // namespace

void register_checkpoint_best(CallbackRegistry& registry) {
  registry.add("checkpoint_best", "keep the best weights by a monitored value (written atomically)", [](Options& o) {
    auto opts = CheckpointBestOptions::read(o);
    return CallbackRegistry::Factory([opts] { return std::make_unique<CheckpointBest>(opts); });
  });
}

}  // namespace engine
