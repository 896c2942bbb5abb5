#include "components/models/model.h"

#include <torch/torch.h>

#include <algorithm>

#include "engine/core/errors.h"

namespace engine {

bool ModelStage::contains(const std::string& key) const {
  for (const auto& p : prefixes)
    if (key.size() > p.size() && key.compare(0, p.size(), p) == 0 && key[p.size()] == '.') return true;
  return false;
}

int stage_of(const std::vector<ModelStage>& stages, const std::string& key) {
  for (size_t i = 0; i < stages.size(); ++i)
    if (stages[i].contains(key)) return static_cast<int>(i);
  return -1;
}

void Model::check_input(const torch::Tensor& x) const {
  if (x.dim() != 4 || x.size(1) != in_chans())
    throw UserError(name() + " was built with in_chans = " + std::to_string(in_chans()) +
                    " and expects inputs [N, " + std::to_string(in_chans()) + ", H, W], got " +
                    c10::str(x.sizes()) + ": set [model] in_chans to the images' channel count");
  const int64_t h = x.size(2), w = x.size(3), m = min_input_size();
  if (h < m || w < m)
    throw UserError(name() + " needs inputs of at least " + std::to_string(m) + "x" + std::to_string(m) +
                    ", got " + std::to_string(h) + "x" + std::to_string(w) +
                    ": resize, e.g. [[data.train_transforms]] name = \"resize\" size = [" +
                    std::to_string(std::max(h, m)) + ", " + std::to_string(std::max(w, m)) + "]");
}

void Model::to_channels_last() {
  // No Module::to(MemoryFormat) in LibTorch: restride each 4-D parameter in place, so that the
  // tensors (and any reference to them) stay the same objects.
  torch::NoGradGuard no_grad;
  for (auto& p : parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
}

}  // namespace engine
