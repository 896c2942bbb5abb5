#pragma once
// The charts of a report, built from the runs' metrics.jsonl lines: several runs overlay (one
// colour per run, one dash per series), one run gets one colour per series.
//   chart-loss-epoch    every */loss against epoch
//   chart-loss-step     train/loss of the step lines against step, with the epochs' valid losses
//   chart-metric-<m>    one per metric (valid/accuracy and valid_ema/accuracy share "accuracy")
//   chart-lr            learning rate against step (epoch when no line has a step)
//   chart-throughput    images/s per epoch: training, and the validation pass
//   chart-wall-time     cumulative wall time against epoch
#include <string>
#include <vector>

#include "engine/report/run_data.h"
#include "engine/report/svg_chart.h"

namespace engine::report {

/// Every chart the runs have data for, in the order above. `labels` names each run in legends.
std::vector<Chart> build_charts(const std::vector<RunData>& runs, const std::vector<std::string>& labels);

}  // namespace engine::report
