#include "engine/trainer/checkpoint_options.h"

namespace engine {

CheckpointOptions CheckpointOptions::read(Options& o) {
  CheckpointOptions c;
  c.every_steps = o.integer("every_steps", c.every_steps,
                            "also write a resume checkpoint every N optimizer steps, mid-epoch (0 = only at epoch ends)", 0);
  c.every_epochs = o.integer("every_epochs", c.every_epochs, "write a resume checkpoint at the end of every N-th epoch (0 = never)", 0);
  // Two by default: if the newest is found damaged on resume, the one before it still is a
  // complete, verified checkpoint.
  c.keep_last = o.integer("keep_last", c.keep_last, "resume checkpoints kept in checkpoints/ (older ones are deleted)", 1);
  return c;
}

}  // namespace engine
