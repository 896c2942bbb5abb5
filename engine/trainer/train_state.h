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

  std::map<std::string, std::string> to_metadata() const;
  static TrainState from_metadata(const std::map<std::string, std::string>& m);
};

}  // namespace engine
