#pragma once
// One register_* function per dataset file; register_datasets() (register.cpp) calls them all.
#include "components/datasets/dataset.h"

namespace engine {

void register_digit_csv(DatasetRegistry& registry);
void register_image_folder(DatasetRegistry& registry);
void register_file_names(DatasetRegistry& registry);

}  // namespace engine
