// Explicit registration (STYLE.md habit 1): no static initialisers that the linker may drop.
#include "components/metrics/all.h"

namespace engine {

void register_metrics(MetricRegistry& registry) {
  register_accuracy(registry);
  register_error_rate(registry);
  register_f1_macro(registry);
  register_top_k_accuracy(registry);
}

}  // namespace engine
