#pragma once
// The Builder's output: a recipe read into typed sections and component factories, validated
// before any compute. load_recipe() reports every error of the file at once (engine check).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/accelerator/accelerator.h"
#include "engine/data/split.h"
#include "engine/trainer/checkpoint_options.h"
#include "engine/trainer/expect.h"  // Bound: one [expect] entry, checked by `engine test`
#include "engine/trainer/phases.h"
#include "engine/trainer/registries.h"

namespace engine {

struct RunSection {
  std::string name = "run";
  int64_t seed = 42;
  std::string output_dir = "runs/{name}";  // "{name}" is replaced by run.name
};

struct DataSection {
  DatasetRegistry::Factory dataset;
  SplitOptions split;
  int64_t batch_size = 64;       // per process
  int64_t eval_batch_size = 0;   // 0 = 2 x batch_size
  int64_t workers = 2;
  int64_t prefetch = 4;
  bool drop_last = true;
  std::vector<TransformRegistry::Factory> train_transforms;
  std::vector<TransformRegistry::Factory> eval_transforms;
};

struct TrainSection {
  int64_t epochs = 1;
  std::vector<std::string> metrics{"accuracy"};
  double label_smoothing = 0.0;
  double grad_clip_norm = 0.0;   // 0 = off
  int64_t max_steps = 0;         // > 0 stops after that many optimizer steps (smoke tests)
  int64_t accumulate_steps = 1;  // micro-batches per optimizer step (gradients summed, one all-reduce)
  FineTuneOptions fine_tune;     // fastai's fine_tune: frozen phase, then discriminative lrs
  struct Ema {
    bool enabled = false;
    double decay = 0.9998;
    bool warmup = false;
  } ema;                         // timm ModelEmaV2, evaluated as valid_ema/* and saved beside the weights
};

struct PredictSection {
  bool enabled = false;
  DatasetRegistry::Factory dataset;
  std::string output = "submission.csv";
  std::string id_column = "ImageId";
  std::string label_column = "Label";
  int64_t id_start = 1;
  int64_t limit = 0;             // > 0: predict only the first N rows (smoke tests)
  std::string labels;            // optional "ImageId,Label" file to score the submission against
};

struct Recipe {
  std::string file;
  std::string resolved_toml;
  RunSection run;
  AcceleratorOptions accelerator;
  DataSection data;
  std::string model_name;
  ModelRegistry::Factory model;
  OptimizerRegistry::Factory optimizer;
  SchedulerRegistry::Factory scheduler;
  TrainSection train;
  std::vector<MetricRegistry::Factory> metrics;
  std::vector<CallbackRegistry::Factory> callbacks;  // listed ones, plus progress_bar and
                                                     // metrics_logger with defaults when not listed
  PredictSection predict;
  CheckpointOptions checkpoint;
  std::map<std::string, Bound> expect;

  /// output_dir with {name} substituted.
  std::string run_dir() const;
};

/// Parses, validates and resolves a recipe. Throws UserError listing every error.
Recipe load_recipe(const std::string& file, const std::vector<std::string>& overrides, const Registries& registries);

/// Every section and key a recipe takes, in reading order, with type, default and doc line: the
/// readers of load_recipe() run in describe mode (`engine list recipe`). Keys are dotted paths
/// ("data.split.valid_fraction"); an array of tables' element keys read "callbacks[].name".
/// Component options (model, optimizer...) are not included: `engine list <kind>` has them.
std::vector<OptionDoc> describe_recipe(const Registries& registries);

}  // namespace engine
