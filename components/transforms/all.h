#pragma once
// One register_* function per transform file; register_transforms() (register.cpp) calls them all.
// Adding a transform: write its .h/.cpp pair, declare its register_* here, call it in register.cpp.
#include "components/transforms/transform.h"

namespace engine {

void register_horizontal_flip(TransformRegistry& registry);
void register_vertical_flip(TransformRegistry& registry);
void register_random_brightness_contrast(TransformRegistry& registry);
void register_resize(TransformRegistry& registry);
void register_normalize(TransformRegistry& registry);
void register_shift_scale_rotate(TransformRegistry& registry);

}  // namespace engine
