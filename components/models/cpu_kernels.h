#pragma once
// Drop-in replacements for two ops whose LibTorch 1.13 CPU implementations dominate ConvNeXt
// training time (measured: see the .cpp). Same maths as the torch op they replace (outputs equal
// up to float rounding); the fast path runs only for CPU float32 tensors outside autocast and
// falls back to the torch op otherwise (bf16/fp16, CUDA, autocast), so callers need no condition.
#include <torch/types.h>

#include <cstdint>

namespace engine {

/// torch::conv2d(x, weight, bias, stride 1, padding k/2, dilation 1, groups = C): a depthwise
/// "same" convolution with an odd square kernel (ConvNeXt's conv_dw). x: [N, C, H, W];
/// weight: [C, 1, k, k]; bias: [C]. Forward and input gradient use oneDNN; the weight gradient,
/// which oneDNN computes at ~1 GFLOP/s for channels-last depthwise, uses a vectorised kernel. Taps
/// that only ever see padding (maps smaller than the kernel) are skipped.
torch::Tensor depthwise_conv2d_same(const torch::Tensor& x, const torch::Tensor& weight,
                                    const torch::Tensor& bias);

/// torch::gelu(x) (exact, erf form). Works on x's memory as one dense buffer, whatever its
/// layout (1.13's kernel is ~7x slower on channels-last NCHW strides); forward and backward
/// vectorised, 16-wide where the CPU has AVX-512 (1.13's exact-GELU backward is scalar).
torch::Tensor gelu_exact(const torch::Tensor& x);

/// y[i] = gelu(x[i]) (exact) for n floats, single-threaded, in the widest vector variant this CPU runs
/// (the kernel of gelu_exact's forward; y may be x).
void gelu_span_float(const float* x, float* y, int64_t n);

/// The GELU backward of the fused ConvNeXt MLP (convnext_mlp.h) on dense float32 rows [rows, cols],
/// single-threaded (the caller splits rows): g = g * gelu'(h) in place (exact GELU), and
/// col_sum[c] += the new g[r][c] over the rows (the fc1 bias gradient).
void gelu_grad_rows(const float* h, float* g, float* col_sum, int64_t rows, int64_t cols);

}  // namespace engine
