#pragma once
// The exact GELU in the engine's own kernels: LibTorch 1.13's CPU implementation was a large share of
// ConvNeXt training time (measured: see the .cpp). Same maths as the torch op they replace (outputs equal
// up to float rounding); the fast path runs only for CPU float32 tensors outside autocast and
// falls back to the torch op otherwise (bf16/fp16, CUDA, autocast), so callers need no condition.
#include <torch/types.h>

#include <cstdint>

namespace engine {

/// torch::gelu(x) (exact, erf form). Works on x's memory as one dense buffer, whatever its
/// layout (1.13's kernel is ~7x slower on channels-last NCHW strides); forward and backward
/// vectorised, 16-wide where the CPU has AVX-512 (1.13's exact-GELU backward is scalar).
torch::Tensor gelu_exact(const torch::Tensor& x);

/// y[i] = gelu(x[i]) (exact) for n floats, single-threaded, in the widest vector variant this CPU runs
/// (the kernel of gelu_exact's forward; y may be x).
void gelu_span_float(const float* x, float* y, int64_t n);

/// True where gelu_exact runs on the AVX-512 polynomial tables (an AVX-512 CPU, a GCC build: largest
/// errors ~1e-7); elsewhere it evaluates exp and the A-S erfc (value 1.0e-7, slope 2.6e-7 on a dense
/// grid, as accurate as LibTorch's own float GELU: 1.6e-7 and 2.6e-7).
bool gelu_uses_tables();

/// The GELU backward of the fused ConvNeXt MLP (convnext_mlp.h) on dense float32 rows [rows, cols],
/// single-threaded (the caller splits rows): g = g * gelu'(h) in place (exact GELU), and
/// col_sum[c] += the new g[r][c] over the rows (the fc1 bias gradient).
void gelu_grad_rows(const float* h, float* g, float* col_sum, int64_t rows, int64_t cols);

}  // namespace engine
