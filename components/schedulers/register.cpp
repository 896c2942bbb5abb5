// Explicit registration (STYLE.md habit 1): no static initialisers that the linker may drop.
#include "components/schedulers/all.h"

namespace engine {

void register_schedulers(SchedulerRegistry& registry) {
  register_constant(registry);
  register_cosine(registry);
  register_one_cycle(registry);
}

}  // namespace engine
