#pragma once
// Small timm layers shared by the models: LayerNorm (last dim), LayerNorm2d (channels of NCHW),
// drop_path (stochastic depth) and timm's trunc_normal_ initialiser.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace engine {

/// LayerNorm over the last dimension with parameters "weight" and "bias" (timm key names).
/// Low-precision input (bf16/fp16, e.g. under autocast) is normalised in fp32 and cast back to the
/// input dtype: LibTorch 1.13 CPU autocast passes bf16 input with fp32 weights to layer_norm,
/// which fails, and fp32 statistics are what timm gets on GPU anyway.
class LayerNormImpl : public torch::nn::Module {
 public:
  explicit LayerNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);
  void reset_parameters();  // ones / zeros

  torch::Tensor weight, bias;

 protected:
  int64_t dim_;
  double eps_;
};
TORCH_MODULE(LayerNorm);

/// timm's LayerNorm2d: LayerNorm over C of an NCHW tensor (through an NHWC permute, which is a
/// free view when the tensor is channels-last in memory). Returns a channels-last-strided NCHW.
class LayerNorm2dImpl : public LayerNormImpl {
 public:
  using LayerNormImpl::LayerNormImpl;
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(LayerNorm2d);

/// Stochastic depth, per sample (timm drop_path with scale_by_keep): in training each sample of
/// `x` is zeroed with probability `p`, survivors scaled by 1/(1-p). Identity when !training or p == 0.
/// The draws are per sample (engine/core/sample_draws.h): inside the trainer a sample's mask does
/// not depend on how many ranks share the batch.
torch::Tensor drop_path(const torch::Tensor& x, double p, bool training);
/// The per-sample factor drop_path multiplies by: [N, 1, ..., 1] of 0 or 1/(1-p), drawn as
/// drop_path draws it; undefined (nothing drawn) when drop_path is the identity.
torch::Tensor drop_path_scale(const torch::Tensor& x, double p, bool training);
/// Dropout (torch::dropout's semantics: each element zeroed with probability p, survivors scaled
/// by 1/(1-p); identity when !training or p == 0) with per-sample draws, as drop_path: sample i's
/// mask is the same on 1 rank or N.
torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

/// timm.layers.trunc_normal_: N(mean, std) truncated to the absolute interval [a, b], drawn
/// exactly as timm does (uniform_, erfinv_, scale, clamp) so that the RNG stream is the same.
/// Note that a, b are values, not multiples of std: with std .02 and b = 2 nothing is truncated.
void trunc_normal_(torch::Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0, double b = 2.0);

}  // namespace engine
