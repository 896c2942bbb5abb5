#include "components/callbacks/checkpoint_best.h"
#include "components/callbacks/early_stopping.h"
#include "components/callbacks/metrics_logger.h"
#include "components/callbacks/progress_bar.h"

namespace engine {

void register_callbacks(CallbackRegistry& registry) {
  register_progress_bar(registry);
  register_metrics_logger(registry);
  register_checkpoint_best(registry);
  register_early_stopping(registry);
}

}  // namespace engine
