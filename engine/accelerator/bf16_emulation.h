#pragma once
// bf16 autocast on a CPU without native bf16 kernels. LibTorch 1.13 runs bf16 convolutions and
// matmuls through oneDNN only with AVX-512 (avx512bw); elsewhere they are reference loops, ~11x
// slower than fp32 (a 3x3 conv, 32x64x28x28, 1 thread on an AVX2 AMD EPYC: 454 vs 41 ms).
//
// A native bf16 kernel multiplies bf16 operands (each product exact in fp32: 8-bit mantissas),
// accumulates in fp32 and rounds the result to bf16. The same numbers come from an fp32 kernel
// run on the bf16-rounded operands with its output rounded to bf16: that is what this installs
// for the lower-precision ops of CPU autocast (conv1d/conv2d, linear, mm, addmm, bmm, baddbmm,
// matmul), at fp32 speed. Rounding is round-to-nearest-even on both paths; only the order of the
// fp32 accumulation may differ. Backward follows through autograd: gradients of inputs and
// weights are rounded to bf16 where the native path produces bf16 ones. Activations saved for
// backward are kept in fp32 (no memory saving on this path).
namespace engine {

/// Installs the emulation for this process (once; later calls only answer) where LibTorch has no
/// fast CPU bf16 kernels: the oneDNN check turned oneDNN off (onednn_convs.h: LibTorch's own bf16
/// convolutions without it ran 10x slower than with it, LibTorch 2.6 on a Zen 5), or LibTorch 1.x
/// on a CPU without avx512bw; not when ENGINE_BF16_EMULATION is "0". Returns whether it is active.
/// Affects CPU autocast to bf16 only: fp32 code and CUDA are untouched.
bool install_bf16_emulation();

}  // namespace engine
