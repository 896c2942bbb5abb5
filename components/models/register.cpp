// Fills the model registry: one call per model family, explicit so the linker never drops one.
#include "components/models/all.h"

namespace engine {

void register_models(ModelRegistry& registry) {
  register_convnext(registry);
  register_resnet(registry);
}

}  // namespace engine
