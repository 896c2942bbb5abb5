#pragma once
// Checkpoints in the run directory, all written atomically (temp file, fsync, rename):
//   checkpoints/best.safetensors  the best weights so far, timm key names (loadable by timm)
//   checkpoints/last.safetensors  weights + optimizer state + loss scaler + TrainState (what a --resume
//                                 will need; nothing reads it yet, issue 7)
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <string>

#include "engine/accelerator/loss_scaler.h"
#include "engine/trainer/train_state.h"

namespace engine {

class Checkpointer {
 public:
  explicit Checkpointer(std::string run_dir);

  std::string best_path() const;
  std::string last_path() const;

  void save_best(const torch::nn::Module& model, const TrainState& state, const std::map<std::string, std::string>& extra);
  void save_last(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, const TrainState& state,
                 const LossScaler& scaler);
  /// Writes weights only, timm keys, to any path (model.safetensors).
  static void save_weights(const std::string& path, const torch::nn::Module& model,
                           const std::map<std::string, std::string>& metadata = {});
  /// Loads weights saved by save_best/save_weights into `model` (strict: every key, every shape).
  static void load_weights(const std::string& path, torch::nn::Module& model);

 private:
  std::string dir_;
};

}  // namespace engine
