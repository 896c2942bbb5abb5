#pragma once
// Registration functions of every model family in components/models/ (called by register_models).
#include "components/models/model.h"

namespace engine {

/// convnext_atto, _femto, _pico, _nano, _tiny, _small (components/models/convnext.h).
void register_convnext(ModelRegistry& registry);
/// resnet18, resnet34, resnet50 (components/models/resnet.h).
void register_resnet(ModelRegistry& registry);

}  // namespace engine
