#pragma once
// Registration functions of every model family in components/models/ (called by register_models).
#include "components/models/model.h"

namespace engine {

/// convnext_atto, _femto, _pico, _nano, _tiny, _small (components/models/convnext.h).
void register_convnext(ModelRegistry& registry);

}  // namespace engine
