#include "components/datasets/dataset.h"

namespace engine {

std::vector<std::string> Dataset::class_names() const {
  std::vector<std::string> names;
  for (int64_t c = 0; c < num_classes(); ++c) names.push_back(std::to_string(c));
  return names;
}

}  // namespace engine
