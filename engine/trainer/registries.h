#pragma once
// One registry per component kind, filled explicitly (no static-initialiser tricks) and passed
// around as an explicit context.
#include "components/callbacks/callback.h"
#include "components/datasets/dataset.h"
#include "components/metrics/metric.h"
#include "components/models/model.h"
#include "components/optimizers/optimizer.h"
#include "components/schedulers/scheduler.h"
#include "components/transforms/transform.h"

namespace engine {

struct Registries {
  DatasetRegistry datasets{"dataset"};
  TransformRegistry transforms{"transform"};
  ModelRegistry models{"model"};
  OptimizerRegistry optimizers{"optimizer"};
  SchedulerRegistry schedulers{"scheduler"};
  MetricRegistry metrics{"metric"};
  CallbackRegistry callbacks{"callback"};
};

/// Every built-in component, registered.
Registries make_registries();

}  // namespace engine
