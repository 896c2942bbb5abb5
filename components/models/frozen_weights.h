#pragma once
// A promise that a model's weights do not change for a while (an evaluation pass): layers may then
// derive forms of their weights once (the convolutions' packed GEMM operands, im2col_conv.h) and
// reuse them for every batch of the pass instead of deriving them again at each forward. Outside
// such a scope nothing derived is kept: the optimizers write parameters in place (the flat AdamW
// through raw pointers, which no version counter sees), so only the caller knows when they are still.
#include <cstdint>

namespace engine {

/// While alive on this thread, the caller promises that no parameter of the models it runs changes.
/// Nestable: an inner scope belongs to the outermost one.
class FrozenWeights {
 public:
  FrozenWeights();
  ~FrozenWeights();
  FrozenWeights(const FrozenWeights&) = delete;
  FrozenWeights& operator=(const FrozenWeights&) = delete;

 private:
  uint64_t outer_;
};

/// The outermost live FrozenWeights scope on this thread, as an id unique in the process (0: none).
/// A form derived under id s stays valid while this returns s.
uint64_t frozen_weights_scope();

}  // namespace engine
