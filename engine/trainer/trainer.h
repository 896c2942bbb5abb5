#pragma once
// The Engine: fit (phases of epochs: train + evaluate), reload the best weights, evaluate, predict,
// write the run directory. The recipe was validated and the objects built (builder.h); this class
// runs them. It talks to processes and devices through the Accelerator only, and to the outside
// world through callbacks and the run directory. Evaluation and prediction go through Evaluator.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "components/models/batch_norm.h"
#include "engine/accelerator/accelerator.h"
#include "engine/accelerator/grad_span.h"
#include "engine/io/background_writer.h"
#include "engine/trainer/builder.h"
#include "engine/trainer/checkpointer.h"
#include "engine/trainer/evaluator.h"
#include "engine/trainer/recipe.h"
#include "engine/trainer/resume.h"
#include "engine/trainer/train_state.h"

namespace engine {

struct FitContext;
class ModelEma;
using Values = std::vector<std::pair<std::string, double>>;

class Trainer {
 public:
  Trainer(const Recipe& recipe, Accelerator& accelerator);
  ~Trainer();

  /// Continue from a checkpoint (`--resume`): set before run(). The run then writes into the
  /// checkpoint's run directory and ends exactly as the uninterrupted run would have.
  void resume(ResumeRequest request) { resume_request_ = std::move(request); }

  /// The whole run. Returns the summary (also written to summary.json): the values of the
  /// weights kept as model.safetensors (the best epoch's when checkpoint_best is used).
  Values run();

  Model& model() { return *parts_.model; }
  const TrainState& state() const { return state_; }

 private:
  void fit();
  void train_epoch(const Phase& phase, int64_t phase_steps, int64_t epoch, FitContext& ctx);
  /// Writes a resume checkpoint of this moment: every rank contributes its RNG and loss sums, rank
  /// 0 writes a snapshot in the background (BackgroundWriter). With `wait` (a stop), every rank
  /// waits until it is on disk. Returns its path on rank 0, "" elsewhere.
  std::string save_checkpoint(bool wait);
  /// Loads a resume checkpoint into the built run: weights, optimizer, EMA, scaler, state, RNG.
  void restore(const ResumePoint& point);
  void apply_schedule(const Phase& phase, int64_t step_in_phase, int64_t phase_steps);
  /// The head's learning rate (the last optimizer group): what logs and the progress bar show.
  double head_lr() const;
  /// valid/* of the model, and valid_ema/* of the EMA weights when train.ema is on.
  Values evaluate_epoch();
  Values predict();
  void write_outputs(const EvalResult& final_eval, const Values& summary, bool has_best);
  void print(const std::string& text) const;
  /// Calls `event` on each callback this process runs: main-only callbacks on rank 0 only.
  template <class F>
  void each_callback(F&& event) {
    for (auto& cb : parts_.callbacks)
      if (!cb->main_process_only() || acc_.is_main()) event(*cb);
  }

  const Recipe& recipe_;
  Accelerator& acc_;
  std::string run_dir_;
  TrainState state_;
  Checkpointer checkpointer_;
  BackgroundWriter writer_;  // rank 0's resume checkpoints; declared after checkpointer_, which its job uses
  RunParts parts_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<ModelEma> ema_;
  std::vector<torch::Tensor> trainable_;  // this phase's parameters with gradients
  StepGradients step_grads_;
  std::vector<double> base_lrs_;          // this phase's peak lr per optimizer group
  RankSum rank_sum_;                      // SyncBatchNorm's all-reduce (batch_norm.h), in DDP jobs
  ResumeRequest resume_request_;
  std::map<size_t, std::string> resumed_callback_state_;  // by callback index, until fit() starts
};

}  // namespace engine
