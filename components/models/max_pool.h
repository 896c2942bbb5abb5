#pragma once
// Max pooling on channels-last maps, for the ResNet stem's 3x3 / 2 pool. LibTorch 1.13's CPU
// max_pool2d took 9-11% of resnet34's evaluation forward at 28 x 28 (perf, batch 128, 1 thread: a
// 3x3 max over 64 channels per output pixel, next to ~75 MFLOP of convolutions per image); this
// kernel takes the maximum over whole channel vectors per window tap. Same results as
// torch::max_pool2d, bit for bit: the first maximum in window order wins (ties: the top-left tap),
// NaN propagates, and the gradient goes to that tap, summed in output order.
#include <torch/types.h>

namespace engine {

/// torch::max_pool2d(x, kernel, stride, padding) (square window, dilation 1, floor mode) for a
/// channels-last 4-d CPU float32 x outside autocast; other inputs (NCHW memory, other dtypes or
/// devices, padding > kernel / 2, which torch rejects) go to torch::max_pool2d itself. Returns a
/// channels-last tensor; the backward (when x needs a gradient) gives a channels-last gradient.
torch::Tensor max_pool2d_nhwc(const torch::Tensor& x, int64_t kernel, int64_t stride, int64_t padding);

}  // namespace engine
