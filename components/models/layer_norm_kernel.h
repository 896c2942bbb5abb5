#pragma once
// LayerNorm over the last dimension for CPU float32 rows, forward and backward in one pass each.
// LibTorch 1.13's CPU layer_norm pays a large per-row overhead on the short rows of a ConvNeXt
// (C = 40..320 channels per pixel): measured ~4 ns per element at batch 32 (forward 3.0 ms +
// backward 2.1 ms per convnext_atto step, ~0.7M elements), where the arithmetic needs a tenth.
#include <torch/types.h>

namespace engine {

/// torch::layer_norm(x, {C}, weight, bias, eps) for x [..., C]: the same maths (two-pass mean and
/// variance per row, biased variance), float rounding aside. Runs its own kernel when x is a
/// contiguous CPU float32 tensor with float32 weight and bias outside autocast, and falls back to
/// torch::layer_norm otherwise. Gradients for x, weight and bias.
torch::Tensor layer_norm_last_dim(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  double eps);

}  // namespace engine
