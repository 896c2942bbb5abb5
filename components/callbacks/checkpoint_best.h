#pragma once
// checkpoint_best: after each epoch, if the monitored value improved, writes
// checkpoints/best.safetensors (timm keys, atomically); also checkpoints/last.safetensors (weights,
// optimizer, scaler, TrainState) every epoch when save_last. At the end of the run the engine
// reloads best.safetensors for evaluation, prediction and model.safetensors.
#include "components/callbacks/callback.h"
#include "components/callbacks/monitor.h"

namespace engine {

struct CheckpointBestOptions {
  Monitor monitor;
  bool save_last = true;
  static CheckpointBestOptions read(Options& o);
};

void register_checkpoint_best(CallbackRegistry& registry);

}  // namespace engine
