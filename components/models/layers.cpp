#include "components/models/layers.h"

#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "components/models/layer_norm_kernel.h"
#include "engine/core/sample_draws.h"

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

namespace {

// [n, m] float32 (CPU) of 0 or 1/keep: element e of local sample j survives when its e-th draw
// (sample_draws.h) is below keep. Inside the trainer's scope the draws belong to the sample's
// position in the global batch, so every layout drops the same elements of the same samples.
torch::Tensor keep_mask(int64_t n, int64_t m, double keep) {
  std::optional<SampleDrawSite> site = next_sample_draw_site();
  if (!site) {  // a model called directly: one key from torch's generator (torch::manual_seed sets it)
    const int64_t key = torch::empty({}, torch::kLong).random_().item<int64_t>();
    site = SampleDrawSite{static_cast<uint64_t>(key), 0, 1};
  }
  torch::Tensor mask = torch::empty({n, m}, torch::kFloat);
  float* out = mask.data_ptr<float>();
  const auto scale = static_cast<float>(1.0 / keep);
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t key = site->sample_key(j);
    for (int64_t e = 0; e < m; ++e) out[j * m + e] = sample_uniform(key, static_cast<uint64_t>(e)) < keep ? scale : 0.0f;
  }
  return mask;
}

// The mask in x's dtype on x's device. To a GPU from pinned memory without blocking: a plain copy
// from pageable memory would make the host wait for every kernel queued before it, once per layer.
torch::Tensor mask_like(const torch::Tensor& mask, const torch::Tensor& x) {
  if (x.is_cuda()) return mask.pin_memory().to(x.device(), x.scalar_type(), /*non_blocking=*/true);
  return mask.to(x.scalar_type());
}

}  // namespace

torch::Tensor drop_path_scale(const torch::Tensor& x, double p, bool training) {
  if (p <= 0.0 || !training) return {};
  std::vector<int64_t> shape(x.dim(), 1);
  shape[0] = x.size(0);
  // One draw per sample, broadcast over the rest: whole residual branches are dropped.
  return mask_like(keep_mask(x.size(0), 1, 1.0 - p).view(shape), x);
}

torch::Tensor drop_path(const torch::Tensor& x, double p, bool training) {
  torch::Tensor mask = drop_path_scale(x, p, training);
  return mask.defined() ? x * mask : x;
}

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (p <= 0.0 || !training || x.numel() == 0) return x;
  if (p >= 1.0) return x * 0;  // as torch::dropout: everything dropped
  const int64_t n = x.size(0);
  return x * mask_like(keep_mask(n, x.numel() / n, 1.0 - p).view(x.sizes()), x);
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
