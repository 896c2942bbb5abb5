#pragma once
// The Engine: fit (train + evaluate every epoch), reload the best weights, evaluate, predict.
// The recipe was validated before; this class only runs it. It talks to processes and devices
// through the Accelerator only, and to the outside world through callbacks and the run directory.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/accelerator/accelerator.h"
#include "engine/data/loader.h"
#include "engine/trainer/checkpointer.h"
#include "engine/trainer/recipe.h"
#include "engine/trainer/train_state.h"

namespace engine {

struct FitContext;

struct EvalResult {
  std::vector<std::pair<std::string, double>> values;  // "valid/loss", "valid/accuracy", ...
  torch::Tensor predictions;                           // [N] int64 class ids, dataset order (gathered)
};

class Trainer {
 public:
  Trainer(const Recipe& recipe, Accelerator& accelerator);
  ~Trainer();

  /// The whole run. Returns the summary (also written to summary.json): the values of the
  /// weights kept as model.safetensors (the best epoch's when checkpoint_best is used).
  std::vector<std::pair<std::string, double>> run();

  Model& model() { return *model_; }
  const TrainState& state() const { return state_; }

 private:
  void build();
  void fit();
  void train_epoch(int64_t epoch, FitContext& ctx, double& loss_sum, double& count);
  void apply_schedule();
  EvalResult evaluate(Loader& loader, const std::vector<size_t>& indices, const std::string& prefix, bool labeled);
  std::vector<std::pair<std::string, double>> predict();
  void print(const std::string& text) const;
  /// Calls `event` on each callback this process runs: main-only callbacks on rank 0 only.
  template <class F>
  void each_callback(F&& event) {
    for (auto& cb : callbacks_)
      if (!cb->main_process_only() || acc_.is_main()) event(*cb);
  }

  const Recipe& recipe_;
  Accelerator& acc_;
  std::string run_dir_;
  TrainState state_;
  Checkpointer checkpointer_;

  std::shared_ptr<const Dataset> dataset_;
  Split split_;
  std::shared_ptr<Model> model_;
  std::vector<torch::Tensor> params_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<double> base_lrs_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Metric>> metrics_;
  std::vector<std::unique_ptr<Callback>> callbacks_;
  std::unique_ptr<Loader> train_loader_, valid_loader_;
  int64_t steps_per_epoch_ = 0;
  int64_t total_steps_ = 0;
};

}  // namespace engine
