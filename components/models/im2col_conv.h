#pragma once
// Convolutions as GEMMs on im2col rows, for the shapes where LibTorch 1.13's oneDNN is slow on CPU
// (measured: see the .cpp). Same maths as torch::conv2d (outputs and gradients equal up to float
// rounding); the GEMM path runs only for CPU float32 tensors outside autocast and falls back to
// torch::conv2d otherwise (other dtypes, CUDA, autocast), so callers need no condition.
#include <torch/types.h>

#include <memory>

namespace engine {

class ConvWeightCache;  // below

/// torch::conv2d(x, weight, bias, stride, padding) (dilation 1, groups 1) as GEMMs: the rows
/// [N*Ho*Wo, T*Cin] gathered from NHWC memory, T the kernel taps that see at least one input
/// pixel (a 3x3 kernel on a 1x1 map with padding 1 has one: the rest only ever sees padding),
/// times the weight in [Cout, kh, kw, Cin] order (the memory of a channels-last weight). Backward:
/// two GEMMs, and none for x when x needs no gradient. Returns a channels-last NCHW tensor;
/// gradients come back channels-last. bias may be undefined.
torch::Tensor im2col_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding);

/// torch::conv2d(x, weight, bias, stride, padding) (dilation 1, groups 1) as one GEMM per output
/// position and live kernel row, on the NHWC memory itself (no rows gathered): for output (oy, ox)
/// and kernel row ky, the pixels under the kernel columns that see the map are one run of
/// memory in every image, and so are those taps of a [Cout, kh, kw, Cin] weight. Multiplies only
/// the taps each position sees (a 3x3 kernel on a 2x2 map: 4 of 9 per position). For small
/// outputs (many GEMMs of N rows otherwise). Same dtype/device/autocast fallback as im2col_conv2d,
/// and it needs an optimised BLAS (engine::blas_sgemm_available()).
/// Where the packed kernels run (packed_gemm.h), each output position is one sum over its taps in
/// registers, the weight's taps packed once per call, or once per FrozenWeights scope (an
/// evaluation pass) with a `cache` (ENGINE_PACKED_CONV=0: OpenBLAS GEMMs per position and kernel row).
torch::Tensor position_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache = nullptr);

/// A convolution layer's weight in the form position_conv2d's packed kernels read, kept from one
/// forward to the next while a FrozenWeights scope (frozen_weights.h) lasts, for the weight it was
/// made from; released at the first call outside one. A layer owns one and passes it on each call.
class ConvWeightCache {
 public:
  ConvWeightCache();
  ~ConvWeightCache();
  ConvWeightCache(const ConvWeightCache&) = delete;
  ConvWeightCache& operator=(const ConvWeightCache&) = delete;

  /// Drops what is kept.
  void release();

  struct Taps;  // what is kept (im2col_conv.cpp)
  Taps& taps();

 private:
  std::unique_ptr<Taps> taps_;
};

/// torch::conv2d(x, weight, bias, stride = k) for a k x k weight (no padding): ConvNeXt's stem and
/// downsample layers. The patches do not overlap, so the rows are the input itself rearranged.
/// Use it where the BLAS is optimised (engine::optimized_blas()): with a reference BLAS, oneDNN's
/// convolution is faster.
torch::Tensor patchify_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

/// torch::conv2d(x, weight, bias, stride, padding, dilation 1, groups 1), through position_conv2d when
/// the output has at most 196 positions per image where the packed kernels run (a ResNet's stages on
/// small images; in training only with 16 input channels or more, so not a one-channel stem; in
/// evaluation the stem too), else at most 16 (its last stages), the BLAS is optimised and
/// ENGINE_SMALL_CONV_GEMM is not "0". Larger outputs: torch::conv2d where oneDNN runs it; through
/// im2col_conv2d where LibTorch's own convolution would (LibTorch without oneDNN, or oneDNN turned off
/// by the check in onednn_convs.h) unless ENGINE_IM2COL_WITHOUT_ONEDNN is "0".
torch::Tensor conv2d_small_output(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache = nullptr);

/// relu(conv2d_small_output(x, weight, bias, ...) + residual) (residual optional, relu optional), without
/// autograd: where the packed kernels take the convolution, the sum and the ReLU are done as each output
/// element is stored (one pass over the output; the bits of the separate ops); elsewhere as separate ops.
/// Evaluation's convolution with its BatchNorm folded into weight and bias (resnet.cpp). The residual
/// must have the output's shape; channels-last for the one-pass form.
torch::Tensor conv2d_small_output_act(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                                      at::IntArrayRef stride, at::IntArrayRef padding, ConvWeightCache* cache,
                                      const torch::Tensor& residual, bool relu);

}  // namespace engine
