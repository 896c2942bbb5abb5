#pragma once
// One register_* function per dataset file; register_datasets() (register.cpp) calls them all.
#include "components/datasets/dataset.h"

namespace engine {

void register_digit_csv(DatasetRegistry& registry);

}  // namespace engine
