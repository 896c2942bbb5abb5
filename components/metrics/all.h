#pragma once
// Every metric component's registration function; register_metrics() (register.cpp) calls them
// all. A new metric: add its .h/.cpp pair, declare its register_* here, call it there.
#include "components/metrics/metric.h"

namespace engine {

void register_accuracy(MetricRegistry& registry);
void register_error_rate(MetricRegistry& registry);
void register_f1_macro(MetricRegistry& registry);
void register_top_k_accuracy(MetricRegistry& registry);

}  // namespace engine
