#include "engine/trainer/builder.h"

#include <torch/torch.h>

#include <opencv2/core.hpp>

#include "components/optimizers/optimizer.h"
#include "engine/core/errors.h"
#include "engine/data/sampler.h"

namespace engine {

std::vector<std::shared_ptr<const Transform>> build_transforms(const std::vector<TransformRegistry::Factory>& fs) {
  std::vector<std::shared_ptr<const Transform>> out;
  for (const auto& f : fs) out.push_back(f());
  return out;
}

std::vector<std::unique_ptr<Metric>> build_metrics(const Recipe& recipe) {
  std::vector<std::unique_ptr<Metric>> out;
  for (const auto& m : recipe.metrics) out.push_back(m());
  return out;
}

int64_t eval_batch_size(const DataSection& d) { return d.eval_batch_size > 0 ? d.eval_batch_size : 2 * d.batch_size; }

void check_channels(const Dataset& dataset, const Model& model, const std::string& what) {
  const int64_t c = dataset.channels();
  if (c == 0 || c == model.in_chans()) return;
  throw UserError(what + " has " + std::to_string(c) + "-channel images (" + dataset.describe() +
                  ") but the model has in_chans = " + std::to_string(model.in_chans()) + ": set [model] in_chans = " +
                  std::to_string(c) + " or the dataset's mode = \"" + (model.in_chans() == 1 ? "gray" : "rgb") + "\"");
}

RunParts build_run(const Recipe& recipe, Accelerator& acc) {
  cv::setNumThreads(1);  // loader threads parallelise over samples; OpenCV's own pool would oversubscribe
  torch::manual_seed(static_cast<uint64_t>(recipe.run.seed));
  RunParts r;
  r.dataset = recipe.data.dataset();
  if (!r.dataset->labeled()) throw UserError("data.dataset must be labeled for training: " + r.dataset->describe());
  r.split = make_split(r.dataset->size(), recipe.data.split);

  r.model = recipe.model();
  check_channels(*r.dataset, *r.model, "data.dataset");
  if (r.dataset->num_classes() != r.model->num_classes())
    throw UserError("data.dataset has " + std::to_string(r.dataset->num_classes()) + " classes but [model] num_classes = " +
                    std::to_string(r.model->num_classes()) + ": set [model] num_classes = " +
                    std::to_string(r.dataset->num_classes()));
  acc.prepare(*r.model);
  StagedGroups staged = staged_param_groups(*r.model);
  r.stage_of_group = staged.stage_of_group;
  r.optimizer = recipe.optimizer(std::move(staged.groups));
  for (size_t g = 0; g < r.optimizer->param_groups().size(); ++g) r.optimizer_lrs.push_back(get_lr(*r.optimizer, g));
  std::shared_ptr<const Scheduler> scheduler(recipe.scheduler());
  r.phases = make_phases(recipe.train.fine_tune, recipe.train.epochs, scheduler, r.model->stages().size());
  for (const auto& c : recipe.callbacks) r.callbacks.push_back(c());

  const auto& d = recipe.data;
  const uint64_t seed = static_cast<uint64_t>(recipe.run.seed);
  r.train_loader = std::make_unique<Loader>(r.dataset, build_transforms(d.train_transforms),
                                            LoaderOptions{d.batch_size, d.workers, d.prefetch, true, seed});
  // The validation samples come back every epoch through the same (usually not random) transforms:
  // up to 512 MiB of them are kept after the first pass instead of being decoded and resized again
  // (the shipped recipe: 10 MB; where every core trains, a DDP rank's loader took that time from its
  // evaluation: 2 ranks on 2 cores evaluated 4500 -> 5190 img/s, bench/RESULTS.md). ENGINE_EVAL_CACHE=0
  // keeps nothing.
  r.valid_loader = std::make_unique<Loader>(
      r.dataset, build_transforms(d.eval_transforms),
      LoaderOptions{eval_batch_size(d), d.workers, d.prefetch, true, seed, int64_t{512} << 20});
  const int world = acc.world().world_size;
  const int64_t batches = train_steps_per_epoch(r.split.train.size(), d.batch_size, world, d.drop_last);
  r.steps_per_epoch = batches / recipe.train.accumulate_steps;
  if (r.steps_per_epoch == 0)
    throw UserError("data.batch_size " + std::to_string(d.batch_size) + " x " + std::to_string(world) + " processes x " +
                    std::to_string(recipe.train.accumulate_steps) + " accumulate_steps exceeds the " +
                    std::to_string(r.split.train.size()) +
                    " training samples: no full optimizer step (lower batch_size or accumulate_steps, or set "
                    "data.drop_last = false)");
  return r;
}

}  // namespace engine
