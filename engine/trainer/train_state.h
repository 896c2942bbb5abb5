#pragma once
// Every piece of run state that is not a tensor: where the run is, what was best so far. It lives
// in one object (never in loop locals) so that a checkpoint can save and restore it exactly.
#include <cstdint>
#include <limits>
#include <map>
#include <string>

namespace engine {

struct TrainState {
  int64_t epoch = 0;          // epochs completed
  int64_t step = 0;           // optimizer steps taken (skipped fp16 steps not counted)
  int64_t skipped_steps = 0;  // steps skipped for non-finite gradients
  int64_t images_seen = 0;    // global, all ranks
  int64_t best_epoch = -1;
  double best_value = std::numeric_limits<double>::quiet_NaN();
  bool stop = false;          // set by callbacks (early stopping); read by the loop
  // Position inside the current epoch, for a mid-epoch resume:
  int64_t batches_done = 0;      // micro-batches of epoch `epoch` consumed (0 at an epoch boundary)
  int64_t phase_first_step = 0;  // `step` when the current phase began (the schedule's origin)
  // This rank's running sums for the epoch's train/loss (per rank: saved once per rank).
  double epoch_loss_sum = 0, epoch_loss_count = 0;

  /// The values shared by every rank, as exact strings (the per-rank loss sums are not included).
  std::map<std::string, std::string> to_metadata() const;
  static TrainState from_metadata(const std::map<std::string, std::string>& m);
};

}  // namespace engine
