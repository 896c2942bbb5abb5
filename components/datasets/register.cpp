#include "components/datasets/all.h"

namespace engine {

// Explicit calls, not static initialisers (STYLE.md habit 1): the linker may drop those.
void register_datasets(DatasetRegistry& registry) {
  register_digit_csv(registry);
  register_image_folder(registry);
  register_file_names(registry);
}

}  // namespace engine
