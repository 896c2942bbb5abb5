#include "components/models/gradient_memory.h"

#include <torch/torch.h>

#include <mutex>
#include <unordered_map>

namespace engine {
namespace {

std::mutex mutex;
std::unordered_map<const void*, torch::Tensor> open;  // by the parameter's data pointer; its sizes

}  // namespace

void open_gradient_memory(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& memory) {
  std::lock_guard<std::mutex> lock(mutex);
  open.clear();
  for (size_t i = 0; i < params.size() && i < memory.size(); ++i)
    if (params[i].defined() && memory[i].defined() && params[i].sizes() == memory[i].sizes())
      open[params[i].data_ptr()] = memory[i];
}

void close_gradient_memory() {
  std::lock_guard<std::mutex> lock(mutex);
  open.clear();
}

torch::Tensor claim_gradient_memory(const torch::Tensor& param) {
  if (!param.defined()) return {};
  std::lock_guard<std::mutex> lock(mutex);
  if (open.empty()) return {};
  const auto it = open.find(param.data_ptr());
  if (it == open.end() || param.sizes() != it->second.sizes()) return {};
  torch::Tensor out = it->second.alias();  // a new tensor: autograd may keep it as the gradient
  open.erase(it);
  return out;
}

}  // namespace engine
