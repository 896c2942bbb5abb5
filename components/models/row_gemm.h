#pragma once
// Matrix products on activation rows ([m, k] row-major, row stride stride(0), dense along k), for the
// layers that run as GEMMs on the pixel rows of a channels-last tensor: the ConvNeXt MLP
// (convnext_mlp.cpp) and the stride == kernel stem and downsample convolutions (im2col_conv.cpp). The
// engine's packed kernels where they run and pay (packed_gemm.h: AVX-512 or AVX2 + FMA, >= 128 rows), OpenBLAS
// through torch::addmm / mm otherwise. CPU float32 operands.
#include <torch/types.h>

namespace engine {

/// W as a matrix [n, k]: a Linear's weight, or a 1x1 convolution's [n, k, 1, 1] (a view).
torch::Tensor as_matrix(const torch::Tensor& w);

/// True when products on these rows take the packed kernels.
bool packed_rows(const torch::Tensor& rows);

/// rows W^T + b for a weight W [n, k] (or [n, k, 1, 1]) and a bias b [n] (undefined: none).
torch::Tensor linear_rows(const torch::Tensor& rows, const torch::Tensor& w, const torch::Tensor& b);

/// rows W for rows [m, n] and W [n, k] (or [n, k, 1, 1]): the input gradient of linear_rows.
torch::Tensor rows_times(const torch::Tensor& rows, const torch::Tensor& w);

/// g^T x for rows g [m, n] and x [m, k], as a tensor of `shape` (n * k elements, e.g. the weight's):
/// the weight gradient of linear_rows. Written into `into` when it is a contiguous tensor of `shape`
/// (claim_gradient_memory, components/models/gradient_memory.h), else into a new tensor.
torch::Tensor weight_grad(const torch::Tensor& g, const torch::Tensor& x, c10::IntArrayRef shape,
                          const torch::Tensor& into = {});

}  // namespace engine
