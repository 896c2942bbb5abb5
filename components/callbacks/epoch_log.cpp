#include "components/callbacks/callback.h"

namespace engine {

double EpochLog::get(const std::string& key, double fallback) const {
  for (const auto& [k, v] : values)
    if (k == key) return v;
  return fallback;
}

bool EpochLog::has(const std::string& key) const {
  for (const auto& [k, v] : values)
    if (k == key) return true;
  return false;
}

}  // namespace engine
