#pragma once
// ConvNeXt's depthwise "same" convolution (conv_dw: 7x7, groups = channels) in the engine's own CPU
// kernels: forward, input gradient and weight gradient on channels-last (NHWC) memory, vectorised
// over channels, every image padded once in a per-thread scratch. LibTorch 1.13 runs it through
// oneDNN at ~12 GFLOP/s forward, pads a whole copy of the batch for the backward and has no fast
// channels-last depthwise weight gradient (measured: the .cpp, bench/RESULTS.md).
#include <torch/types.h>

namespace engine {

/// torch::conv2d(x, weight, bias, stride 1, padding k/2, dilation 1, groups = C): a depthwise
/// "same" convolution with an odd square kernel. x: [N, C, H, W]; weight: [C, 1, k, k]; bias: [C]
/// (may be undefined). The engine's kernels run for CPU float32 tensors outside autocast with k in
/// {3, 5, 7} and C a multiple of 8 (every ConvNeXt width); the result is then channels-last. Anything
/// else goes to torch::conv2d. Taps that only ever see padding (maps smaller than the kernel) are
/// skipped; their weight gradient is zero. Same maths as conv2d; the summation order differs (float
/// rounding), and does not depend on the number of threads.
torch::Tensor depthwise_conv2d_same(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias);

}  // namespace engine
