#pragma once
// [checkpoint]: when the trainer writes resume checkpoints (checkpoints/step-<N>.safetensors) and
// how many it keeps. A resume checkpoint holds everything `engine run --resume` needs to continue
// bit for bit: weights, optimizer, loss scaler, EMA, every rank's RNG and position in the epoch,
// callback state and the resolved recipe.
#include <cstdint>

#include "engine/recipe/options.h"

namespace engine {

struct CheckpointOptions {
  int64_t every_steps = 0;   // also mid-epoch, every N optimizer steps (0 = only at epoch ends)
  int64_t every_epochs = 1;  // at the end of every N-th epoch (0 = never at epoch ends)
  int64_t keep_last = 2;     // resume checkpoints kept; older ones are deleted after a newer is verified
  static CheckpointOptions read(Options& o);
};

}  // namespace engine
