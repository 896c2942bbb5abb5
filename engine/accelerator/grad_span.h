#pragma once
// One tensor over many: when gradients lie back to back in one buffer (FlatAdamW's arena, see
// components/optimizers/flat_adamw.h), operations on all of them (zeroing, the DDP all-reduce,
// the 1/world mean) run once on that buffer instead of once per parameter.
#include <torch/types.h>

#include <optional>
#include <vector>

namespace engine {

/// A 1-d tensor aliasing exactly the memory of `tensors` when they are all defined, dense
/// (non-overlapping, any strides), of one dtype, on one storage, and together cover one gap-free
/// range of it, in any order; nullopt otherwise (then the caller loops over the tensors).
/// The result shares the storage (keeps it alive); element order is memory order, which is the
/// same on every rank when every rank built its buffers the same way.
std::optional<torch::Tensor> single_span(const std::vector<torch::Tensor>& tensors);

/// Zeroes the gradients of `params` that have one: one fill when they form a single span.
void zero_grads(const std::vector<torch::Tensor>& params);

/// The gradients of one optimizer step written once instead of zeroed and then added to. Zeroing a
/// span and letting autograd add every new gradient into it costs a fill and an add over all the
/// gradients each step (4 ms of a ~95 ms convnext_atto step at batch 64, 1 thread: op profile in
/// bench/RESULTS.md); autograd hands a new gradient over without a copy when the parameter has none.
class StepGradients {
 public:
  /// Start of an optimizer step. When the gradients of `params` form one span (FlatAdamW's arena),
  /// keeps them, unsets each parameter's gradient and opens each one's memory to kernels that write
  /// their weight gradient in place (components/models/gradient_memory.h); otherwise zeroes them
  /// (zero_grads).
  void begin(const std::vector<torch::Tensor>& params);
  /// After the step's first backward: closes the gradient memory; each kept gradient takes the new
  /// one's values (a copy unless a kernel wrote it in place; zeros where a parameter got none, as after
  /// zero_grads) and is the parameter's gradient again, so that later
  /// micro-batches add into the span and the all-reduce and the optimizer find it as before.
  /// Nothing to do after a begin() that zeroed.
  void end(const std::vector<torch::Tensor>& params);

 private:
  std::vector<torch::Tensor> kept_;  // one per parameter, in order; empty when begin() zeroed
};

}  // namespace engine
