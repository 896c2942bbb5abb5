#pragma once
// ConvNeXt's block tail, x + drop_path(gamma * fc2(gelu(fc1(t)))), as one autograd function on CPU
// float32 (convnext.cpp). Composed of torch ops it runs ~10 passes over the activations besides its
// four GEMMs: addmm copies each bias into its output before the GEMM, the layer scale, the drop-path
// mask and the residual add each allocate and write a tensor, and their backwards write more
// (g * mask, g * gamma, two column sums for the biases, one for gamma). Here the layer scale, drop
// path and residual add are one pass forward, and one pass backward that also sums fc2's bias and
// gamma gradients; fc1's bias gradient is summed inside the GELU backward pass. The GEMMs are
// packed_gemm.h's kernels where they run (AVX-512 or AVX2 + FMA; the bias preloaded into the output tile), and
// then the MLP goes in 96-row blocks (fc1, GELU, fc2 and the tail while a block is in cache);
// elsewhere addmm / mm on OpenBLAS. Same maths, float rounding aside; measured in bench/RESULTS.md.
#include <torch/types.h>

namespace engine {

/// x + drop_path(gamma * (gelu(t W1^T + b1) W2^T + b2)) over the channels of NCHW x and t
/// ([N, C, H, W], both channels-last in memory), fc1 weight w1 [4C, C] or [4C, C, 1, 1], fc2 w2
/// [C, 4C] or [C, 4C, 1, 1], biases b1 [4C], b2 [C], gamma [C]. drop_path as engine::drop_path(p,
/// training): one Bernoulli draw per sample from the same generator, in the same order, so a run
/// makes the same draws whichever path runs. Returns a channels-last NCHW tensor, or an undefined
/// one (nothing drawn) when it does not apply: not CPU float32 outside autocast, not channels-last,
/// or ENGINE_FUSED_MLP=0; then the caller composes the ops itself.
torch::Tensor convnext_mlp_residual(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& w1,
                                    const torch::Tensor& b1, const torch::Tensor& w2, const torch::Tensor& b2,
                                    const torch::Tensor& gamma, double drop_path, bool training);

}  // namespace engine
