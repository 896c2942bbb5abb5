#include "components/models/layers.h"

#include <torch/torch.h>

#include <cmath>

#include "components/models/layer_norm_kernel.h"

namespace engine {

LayerNormImpl::LayerNormImpl(int64_t dim, double eps) : dim_(dim), eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
  bias = register_parameter("bias", torch::zeros({dim}));
}

void LayerNormImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  weight.fill_(1.0);
  bias.zero_();
}

torch::Tensor LayerNormImpl::forward(const torch::Tensor& x) {
  // Same dtype: the engine's kernel on CPU float32 (layer_norm_kernel.h), torch's otherwise.
  if (x.scalar_type() == weight.scalar_type()) return layer_norm_last_dim(x, weight, bias, eps_);
  // Low-precision activations: statistics in fp32 (see header), result back in the input dtype
  // so that the next conv/linear sees what autocast would have given it.
  torch::Tensor y =
      torch::layer_norm(x.to(torch::kFloat), {dim_}, weight.to(torch::kFloat), bias.to(torch::kFloat), eps_);
  return y.to(x.scalar_type());
}

torch::Tensor LayerNorm2dImpl::forward(const torch::Tensor& x) {
  return LayerNormImpl::forward(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
}

torch::Tensor drop_path_scale(const torch::Tensor& x, double p, bool training) {
  if (p <= 0.0 || !training) return {};
  const double keep = 1.0 - p;
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  // One Bernoulli draw per sample, broadcast over the rest: whole residual branches are dropped.
  return torch::empty(shape, x.options()).bernoulli_(keep).div_(keep);
}

torch::Tensor drop_path(const torch::Tensor& x, double p, bool training) {
  torch::Tensor mask = drop_path_scale(x, p, training);
  return mask.defined() ? x * mask : x;
}

void trunc_normal_(torch::Tensor& t, double mean, double std, double a, double b) {
  auto cdf = [](double v) { return (1.0 + std::erf(v / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  torch::NoGradGuard no_grad;
  // Inverse-CDF sampling, the same sequence of in-place ops as timm (and torch.nn.init).
  t.uniform_(2 * l - 1, 2 * u - 1);
  t.erfinv_();
  t.mul_(std * std::sqrt(2.0));
  t.add_(mean);
  t.clamp_(a, b);
}

}  // namespace engine
