// Explicit registration (STYLE.md habit 1): no static initialisers that the linker may drop.
#include "components/optimizers/all.h"

namespace engine {

void register_optimizers(OptimizerRegistry& registry) {
  register_sgd(registry);
  register_adam(registry);
  register_adamw(registry);
}

}  // namespace engine
