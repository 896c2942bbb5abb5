#pragma once
// What callbacks may see and touch during fit(): the run, the model, the state, the checkpointer.
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>

#include "components/models/model.h"
#include "engine/accelerator/loss_scaler.h"
#include "engine/trainer/checkpointer.h"
#include "engine/trainer/train_state.h"

namespace engine {

class ModelEma;

struct FitContext {
  std::string run_name;
  std::string run_dir;
  Model& model;
  torch::optim::Optimizer& optimizer;
  const LossScaler& scaler;
  TrainState& state;
  Checkpointer& checkpointer;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  int64_t world_size = 1;
  int64_t batch_size = 0;   // per process
  ModelEma* ema = nullptr;  // when train.ema is on: the averaged weights (with_weights to use them)
};

}  // namespace engine
