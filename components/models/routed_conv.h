#pragma once
// The convolution the engine's models call where LibTorch's own might be wrong on this machine.
//
// LibTorch 2.6's oneDNN computed strided patch convolutions (stride > 1 and stride >= kernel: a
// ResNet's 1x1 stride-2 shortcut, ConvNeXt's 2x2 stride-2 downsample and 4x4 stride-4 stem) wrong
// on a Zen 5 VM, and every other convolution the engine runs right (bench/RESULTS.md). The check
// at process start (engine/accelerator/onednn_convs.h) then calls route_patch_convs(true): those
// convolutions go to the engine's GEMMs in float32 (a small part of a model's work) and oneDNN keeps
// the rest, instead of LibTorch's own kernels for everything (10x slower in bf16).
#include <torch/types.h>

namespace engine {

/// Whether a convolution with this kernel [Cout, Cin, kh, kw] and stride is a strided patch
/// convolution: stride > 1 and stride >= kernel in both directions (windows that do not overlap).
bool patch_conv(const torch::Tensor& weight, at::IntArrayRef stride);

/// Sends the process's patch convolutions to the GEMMs (true) or to torch::conv2d (false, the
/// default). Set once, by the oneDNN check, before the first step.
void route_patch_convs(bool on);
bool patch_convs_routed();

/// torch::conv2d(x, weight, bias, stride, padding) (dilation 1, groups 1), except that while
/// patch_convs_routed(), a CPU floating-point patch convolution runs as im2col_conv2d in float32
/// with autocast off, its result in the dtype torch::conv2d would give (autocast's, else x's).
torch::Tensor routed_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     at::IntArrayRef stride, at::IntArrayRef padding);

}  // namespace engine
