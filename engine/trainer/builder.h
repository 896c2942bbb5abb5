#pragma once
// The Builder (DESIGN.md): a validated Recipe -> the objects one run needs. No loop here; the
// Trainer runs what this builds. Checks that need built objects (the dataset's channels against
// the model's in_chans, a batch larger than the data) are UserErrors raised here, before any step.
#include <memory>
#include <string>
#include <vector>

#include "components/callbacks/callback.h"
#include "components/datasets/dataset.h"
#include "components/metrics/metric.h"
#include "components/models/model.h"
#include "components/schedulers/scheduler.h"
#include "components/transforms/transform.h"
#include "engine/accelerator/accelerator.h"
#include "engine/data/loader.h"
#include "engine/data/split.h"
#include "engine/trainer/phases.h"
#include "engine/trainer/recipe.h"

namespace engine {

struct RunParts {
  std::shared_ptr<const Dataset> dataset;
  Split split;
  std::shared_ptr<Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::vector<size_t> stage_of_group;  // optimizer group -> model stage
  std::vector<double> optimizer_lrs;   // each group's lr as the optimizer was built
  std::vector<Phase> phases;
  std::vector<std::unique_ptr<Callback>> callbacks;
  std::unique_ptr<Loader> train_loader, valid_loader;
  int64_t steps_per_epoch = 0;         // optimizer steps (batches / accumulate_steps)
};

std::vector<std::shared_ptr<const Transform>> build_transforms(const std::vector<TransformRegistry::Factory>& fs);
std::vector<std::unique_ptr<Metric>> build_metrics(const Recipe& recipe);
int64_t eval_batch_size(const DataSection& d);

/// Dataset + split, model (prepared on the accelerator: same weights on every rank), optimizer
/// over the model's staged groups, phases, callbacks, loaders.
RunParts build_run(const Recipe& recipe, Accelerator& acc);

/// A UserError when a dataset's channel count differs from the model's in_chans.
void check_channels(const Dataset& dataset, const Model& model, const std::string& what);

}  // namespace engine
