#pragma once
// checkpoint_best: after each epoch, if the monitored value improved, writes
// checkpoints/best.safetensors (timm keys, atomically). At the end of the run the engine reloads
// best.safetensors for evaluation, prediction and model.safetensors. The best value and epoch live
// in TrainState, so a resumed run keeps them. (Resume checkpoints are the trainer's: [checkpoint].)
#include "components/callbacks/callback.h"
#include "components/callbacks/monitor.h"

namespace engine {

struct CheckpointBestOptions {
  Monitor monitor;
  static CheckpointBestOptions read(Options& o);
};

void register_checkpoint_best(CallbackRegistry& registry);

}  // namespace engine
