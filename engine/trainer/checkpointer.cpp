#include "engine/trainer/checkpointer.h"

#include <filesystem>

#include "components/optimizers/optimizer.h"
#include "engine/io/safetensors.h"
#include "engine/io/weights.h"

namespace engine {

Checkpointer::Checkpointer(std::string run_dir) : dir_(std::move(run_dir) + "/checkpoints") {}

std::string Checkpointer::best_path() const { return dir_ + "/best.safetensors"; }
std::string Checkpointer::last_path() const { return dir_ + "/last.safetensors"; }

void Checkpointer::save_weights(const std::string& path, const torch::nn::Module& model,
                                const std::map<std::string, std::string>& metadata) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  save_safetensors(path, model_tensors(model), metadata);
}

void Checkpointer::save_best(const torch::nn::Module& model, const TrainState& state,
                             const std::map<std::string, std::string>& extra) {
  auto meta = state.to_metadata();
  meta.insert(extra.begin(), extra.end());
  save_weights(best_path(), model, meta);
}

void Checkpointer::save_last(const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                             const TrainState& state, const LossScaler& scaler) {
  NamedTensors all;
  for (auto& [k, v] : model_tensors(model)) all.emplace_back("model/" + k, v);
  for (auto& [k, v] : optimizer_state(optimizer)) all.emplace_back("optimizer/" + k, v.detach().cpu().contiguous());
  auto meta = state.to_metadata();
  meta["scaler.scale"] = std::to_string(scaler.scale());
  meta["scaler.growth_tracker"] = std::to_string(scaler.growth_tracker());
  std::filesystem::create_directories(dir_);
  save_safetensors(last_path(), all, meta);
}

void Checkpointer::load_weights(const std::string& path, torch::nn::Module& model) {
  engine::load_weights(model, path);
}

}  // namespace engine
