#pragma once
// Every optimizer component's registration function; register_optimizers() (register.cpp) calls
// them all. A new optimizer: add its .h/.cpp pair, declare its register_* here, call it there.
#include "components/optimizers/optimizer.h"

namespace engine {

void register_sgd(OptimizerRegistry& registry);
void register_adam(OptimizerRegistry& registry);
void register_adamw(OptimizerRegistry& registry);

}  // namespace engine
