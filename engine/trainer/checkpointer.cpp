#include "engine/trainer/checkpointer.h"

#include <filesystem>

#include "components/optimizers/optimizer.h"
#include "engine/core/errors.h"
#include "engine/io/safetensors.h"

namespace engine {

namespace {

// Parameters then buffers, under their module paths: exactly timm's state_dict keys.
NamedTensors weights_of(const torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value().detach().cpu().contiguous());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value().detach().cpu().contiguous());
  return out;
}

}  // namespace

Checkpointer::Checkpointer(std::string run_dir) : dir_(std::move(run_dir) + "/checkpoints") {}

std::string Checkpointer::best_path() const { return dir_ + "/best.safetensors"; }
std::string Checkpointer::last_path() const { return dir_ + "/last.safetensors"; }

void Checkpointer::save_weights(const std::string& path, const torch::nn::Module& model,
                                const std::map<std::string, std::string>& metadata) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  save_safetensors(path, weights_of(model), metadata);
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
  for (auto& [k, v] : weights_of(model)) all.emplace_back("model/" + k, v);
  for (auto& [k, v] : optimizer_state(optimizer)) all.emplace_back("optimizer/" + k, v.detach().cpu().contiguous());
  auto meta = state.to_metadata();
  meta["scaler.scale"] = std::to_string(scaler.scale());
  meta["scaler.growth_tracker"] = std::to_string(scaler.growth_tracker());
  std::filesystem::create_directories(dir_);
  save_safetensors(last_path(), all, meta);
}

void Checkpointer::load_weights(const std::string& path, torch::nn::Module& model) {
  SafetensorsFile f = load_safetensors(path);
  std::map<std::string, torch::Tensor> by_name(f.tensors.begin(), f.tensors.end());
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  auto assign = [&](const std::string& key, torch::Tensor target) {
    auto it = by_name.find(key);
    if (it == by_name.end()) return missing.push_back(key);
    if (it->second.sizes() != target.sizes())
      throw UserError(path + ": " + key + " has shape " + c10::str(it->second.sizes()) + ", the model expects " +
                      c10::str(target.sizes()));
    target.copy_(it->second);
    by_name.erase(it);
  };
  for (auto& p : model.named_parameters()) assign(p.key(), p.value());
  for (auto& b : model.named_buffers()) assign(b.key(), b.value());
  if (!missing.empty() || !by_name.empty()) {
    std::string msg = path + ": weights do not match the model:";
    for (const auto& k : missing) msg += " missing " + k + ";";
    for (const auto& [k, v] : by_name) msg += " unexpected " + k + ";";
    throw UserError(msg);
  }
}

}  // namespace engine
