#pragma once
// metrics_logger: run_dir/metrics.jsonl (one {"type":"epoch",...} line per epoch, plus one
// {"type":"step",...} line every `every_steps` optimizer steps) and run_dir/metrics.csv (one row
// per epoch). Everything a plot needs: epoch, step, losses, metrics, lr, seconds, images/s.
// Lines are appended and flushed as they happen, so a killed run keeps its history.
#include "components/callbacks/callback.h"

namespace engine {

struct MetricsLoggerOptions {
  int64_t every_steps = 50;  // 0 = epoch lines only
  static MetricsLoggerOptions read(Options& o);
};

void register_metrics_logger(CallbackRegistry& registry);

}  // namespace engine
