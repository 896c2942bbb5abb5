#pragma once
// Where a parameter's gradient of this optimizer step should be written. StepGradients
// (engine/accelerator/grad_span.h) keeps the step's gradient buffer while the first backward runs
// and opens each parameter's part of it here; a kernel that computes a weight gradient itself
// (components/models: the ConvNeXt MLP) writes it straight into that memory, and autograd keeps a
// lone gradient as it is, so StepGradients::end() finds it in place instead of copying it (13.6 MB
// for convnext_atto, every step). Kernels that do not ask allocate as usual.
#include <torch/types.h>

#include <vector>

namespace engine {

/// Opens `memory[i]` as the gradient memory of `params[i]` (same sizes; undefined entries are
/// skipped), closing whatever was open before.
void open_gradient_memory(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& memory);

/// Closes all (the step's first backward is over).
void close_gradient_memory();

/// The open gradient memory of `param` as a new tensor of param's sizes aliasing it, handed out once
/// (a parameter used twice gets its memory only for the first gradient); undefined when none is open
/// for it. The caller writes the whole gradient into it and returns it from its backward.
torch::Tensor claim_gradient_memory(const torch::Tensor& param);

}  // namespace engine
