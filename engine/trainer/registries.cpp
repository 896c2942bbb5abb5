#include "engine/trainer/registries.h"

namespace engine {

Registries make_registries() {
  Registries r;
  register_datasets(r.datasets);
  register_transforms(r.transforms);
  register_models(r.models);
  register_optimizers(r.optimizers);
  register_schedulers(r.schedulers);
  register_metrics(r.metrics);
  register_callbacks(r.callbacks);
  return r;
}

}  // namespace engine
