#include "components/transforms/all.h"

namespace engine {

// Explicit calls, not static initialisers: a static library's unreferenced objects are dropped by
// the linker, and with them any self-registration (STYLE.md habit 1).
void register_transforms(TransformRegistry& registry) {
  register_horizontal_flip(registry);
  register_vertical_flip(registry);
  register_random_brightness_contrast(registry);
  register_resize(registry);
  register_normalize(registry);
  register_shift_scale_rotate(registry);
}

}  // namespace engine
