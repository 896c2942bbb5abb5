#include "components/models/frozen_weights.h"

#include <atomic>

namespace engine {
namespace {

std::atomic<uint64_t> last_frozen_scope{0};
thread_local uint64_t current_frozen_scope = 0;

}  // namespace

FrozenWeights::FrozenWeights() : outer_(current_frozen_scope) {
  if (current_frozen_scope == 0) current_frozen_scope = ++last_frozen_scope;
}

FrozenWeights::~FrozenWeights() { current_frozen_scope = outer_; }

uint64_t frozen_weights_scope() { return current_frozen_scope; }

}  // namespace engine
