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

}  // namespace engine
