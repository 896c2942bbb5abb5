#include "components/callbacks/monitor.h"

#include <doctest/doctest.h>

#include <cmath>

#include "components/callbacks/callback.h"
#include "components/callbacks/early_stopping.h"
#include "engine/trainer/fit_context.h"

using namespace engine;

TEST_CASE("monitor direction: auto minimises losses and error rates, maximises the rest") {
  Monitor m;
  m.key = "valid/accuracy";
  CHECK(m.maximize());
  CHECK(m.improved(0.9, NAN));  // the first value always counts
  CHECK(m.improved(0.91, 0.9));
  CHECK_FALSE(m.improved(0.9, 0.9));
  CHECK_FALSE(m.improved(NAN, 0.9));
  m.key = "valid/loss";
  CHECK_FALSE(m.maximize());
  CHECK(m.improved(0.1, 0.2));
  m.key = "valid/error_rate";
  CHECK_FALSE(m.maximize());
  m.mode = "max";
  CHECK(m.maximize());
  m.key = "valid/loss";
  m.mode = "auto";
  CHECK_FALSE(m.improved(0.195, 0.2, 0.01));  // within min_delta: not an improvement
}

TEST_CASE("early_stopping stops after `patience` epochs without improvement, on every rank") {
  CallbackRegistry reg("callback");
  register_early_stopping(reg);
  std::vector<OptionDoc> docs;
  Options o = Options::describe(&docs);  // defaults: monitor valid/loss, patience 3
  auto cb = reg.find("early_stopping")->parse(o)();
  CHECK_FALSE(cb->main_process_only());

  TrainState state;
  // Only `state` is touched by early stopping; the other references are never used.
  struct Unused : Model {
    torch::Tensor forward(torch::Tensor x) override { return x; }
    int64_t num_classes() const override { return 0; }
    int64_t in_chans() const override { return 1; }
    std::vector<ModelStage> stages() const override { return {}; }
    std::string first_conv() const override { return ""; }
    std::string classifier() const override { return ""; }
  } model;
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
  LossScaler scaler;
  Checkpointer ckpt("/nonexistent");
  FitContext ctx{"t", "/nonexistent", model, opt, scaler, state, ckpt, 10, 1, 1, 1};

  const double losses[] = {1.0, 0.8, 0.81, 0.82, 0.83};
  for (int e = 0; e < 5; ++e) {
    EpochLog log;
    log.epoch = e + 1;
    log.values = {{"valid/loss", losses[e]}};
    cb->on_epoch_end(ctx, log);
    CHECK(state.stop == (e == 4));  // best at epoch 2, then 3 epochs without improvement
  }
}
