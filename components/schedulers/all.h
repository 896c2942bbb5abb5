#pragma once
// Every scheduler component's registration function; register_schedulers() (register.cpp) calls
// them all. A new scheduler: add its .h/.cpp pair, declare its register_* here, call it there.
#include "components/schedulers/scheduler.h"

namespace engine {

void register_constant(SchedulerRegistry& registry);
void register_cosine(SchedulerRegistry& registry);
void register_one_cycle(SchedulerRegistry& registry);

}  // namespace engine
