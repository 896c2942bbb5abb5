#pragma once
// The monitored value of checkpoint_best and early_stopping: which key, which direction.
#include <string>

#include "engine/recipe/options.h"

namespace engine {

struct Monitor {
  std::string key = "valid/accuracy";
  std::string mode = "auto";  // auto | max | min; auto = min for losses and error rates, else max
  static Monitor read(Options& o, const std::string& default_key);
  bool maximize() const;
  /// True when `value` beats `best` by more than min_delta (a NaN best is always beaten).
  bool improved(double value, double best, double min_delta = 0) const;
};

}  // namespace engine
