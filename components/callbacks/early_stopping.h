#pragma once
// early_stopping: stops training when the monitored value has not improved by more than
// min_delta for `patience` epochs. Runs on every rank (it sees the same reduced values on each),
// so all ranks stop at the same epoch.
#include "components/callbacks/callback.h"
#include "components/callbacks/monitor.h"

namespace engine {

struct EarlyStoppingOptions {
  Monitor monitor;
  int64_t patience = 3;
  double min_delta = 0.0;
  static EarlyStoppingOptions read(Options& o);
};

void register_early_stopping(CallbackRegistry& registry);

}  // namespace engine
