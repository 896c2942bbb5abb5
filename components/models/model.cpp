#include "components/models/model.h"

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

}  // namespace engine
