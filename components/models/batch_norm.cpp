#include "components/models/batch_norm.h"

#include <torch/torch.h>

#include <cstdint>

#include "components/models/threads.h"

namespace engine {

namespace {

thread_local const RankSum* current_rank_sum = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// y = (x - mean) * invstd * w + b with mean, var over (N, H, W) of every rank's x. Returns
// {y, mean, var (biased), count}; the last three for the running statistics.
struct SyncBatchNormFn : torch::autograd::Function<SyncBatchNormFn> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& shift, double eps, int64_t sum_address) {
    const auto& sum = *reinterpret_cast<const RankSum*>(sum_address);
    const int64_t c = x.size(1);
    const torch::Tensor xf = x.to(torch::kFloat);
    const torch::Tensor d = xf - shift.to(torch::kFloat).view({1, c, 1, 1});
    torch::Tensor stats = torch::cat({d.sum({0, 2, 3}), d.square().sum({0, 2, 3}),
                                      torch::full({1}, static_cast<double>(x.numel() / c), xf.options())});
    sum(stats);
    const torch::Tensor n = stats.slice(0, 2 * c, 2 * c + 1);
    const torch::Tensor m1 = stats.slice(0, 0, c) / n, m2 = stats.slice(0, c, 2 * c) / n;
    const torch::Tensor var = (m2 - m1 * m1).clamp_min(0.0);
    const torch::Tensor mean = shift.to(torch::kFloat) + m1;
    const torch::Tensor invstd = (var + eps).rsqrt();
    const torch::Tensor xhat = (xf - mean.view({1, c, 1, 1})) * invstd.view({1, c, 1, 1});
    const torch::Tensor y = xhat * weight.to(torch::kFloat).view({1, c, 1, 1}) + bias.to(torch::kFloat).view({1, c, 1, 1});
    ctx->save_for_backward({xhat, weight, invstd, n});
    ctx->saved_data["sum"] = sum_address;
    ctx->saved_data["dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->mark_non_differentiable({mean, var, n});
    return {y.to(x.scalar_type()), mean, var, n};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xhat = saved[0], &weight = saved[1], &invstd = saved[2], &n = saved[3];
    const auto& sum = *reinterpret_cast<const RankSum*>(ctx->saved_data["sum"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const int64_t c = xhat.size(1);
    const torch::Tensor dy = grads[0].to(torch::kFloat);
    const torch::Tensor sum_dy = dy.sum({0, 2, 3}), sum_dy_xhat = (dy * xhat).sum({0, 2, 3});
    // This rank's share of the weight and bias gradients, before the global sums are taken.
    const torch::Tensor dweight = sum_dy_xhat.to(weight.scalar_type()), dbias = sum_dy.to(weight.scalar_type());
    torch::Tensor both = torch::cat({sum_dy, sum_dy_xhat});
    sum(both);
    const torch::Tensor g_dy = both.slice(0, 0, c) / n, g_dy_xhat = both.slice(0, c, 2 * c) / n;
    const torch::Tensor dx = (dy - g_dy.view({1, c, 1, 1}) - xhat * g_dy_xhat.view({1, c, 1, 1})) *
                             (weight.to(torch::kFloat) * invstd).view({1, c, 1, 1});
    return {dx.to(dtype), dweight, dbias, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// batch_norm(x), or relu(batch_norm(x) [+ residual]), in training: one autograd node around LibTorch's own kernels:
// the calls torch::batch_norm and autograd make (at::native_batch_norm, which updates the running
// statistics in place; threshold_backward, then at::native_batch_norm_backward), so the same bits
// as the unfused ops. Why a node of its own: on maps below kSplitMinElements all of it runs on the
// calling thread (threads.h), forward and backward; each unfused op would wake the intra-op threads.
struct BatchNormFn : torch::autograd::Function<BatchNormFn> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, const torch::Tensor& residual, torch::Tensor running_mean,
                               torch::Tensor running_var, double momentum, double eps, bool relu, bool add) {
    OneThreadIf serial(x.numel() < kSplitMinElements);
    auto out = at::native_batch_norm(x, weight, bias, running_mean, running_var, true, momentum, eps);
    torch::Tensor& y = std::get<0>(out);
    if (add) y.add_(residual);
    if (relu) y.relu_();
    ctx->save_for_backward({x, weight, std::get<1>(out), std::get<2>(out), relu ? y : torch::Tensor()});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["add"] = add;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3], &y = saved[4];
    const bool add = ctx->saved_data["add"].toBool();
    OneThreadIf serial(x.numel() < kSplitMinElements);
    const torch::Tensor g = y.defined() ? at::threshold_backward(grads[0], y, 0) : grads[0];
    const std::array<bool, 3> mask = {ctx->needs_input_grad(0), ctx->needs_input_grad(1), ctx->needs_input_grad(2)};
    auto in = at::native_batch_norm_backward(g, x, weight, {}, {}, mean, invstd, true, ctx->saved_data["eps"].toDouble(),
                                             mask);
    return {std::get<0>(in), std::get<1>(in), std::get<2>(in), add ? g : torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

RankStatsScope::RankStatsScope(const RankSum* sum) : outer_(current_rank_sum) { current_rank_sum = sum; }
RankStatsScope::~RankStatsScope() { current_rank_sum = outer_; }

SyncBatchNorm2dImpl::SyncBatchNorm2dImpl(int64_t num_features, double eps, double momentum)
    : num_features(num_features), eps(eps), momentum(momentum) {
  reset();
}

void SyncBatchNorm2dImpl::reset() {
  weight = register_parameter("weight", torch::empty({num_features}));
  bias = register_parameter("bias", torch::empty({num_features}));
  running_mean = register_buffer("running_mean", torch::empty({num_features}));
  running_var = register_buffer("running_var", torch::empty({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  reset_parameters();
}

void SyncBatchNorm2dImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  weight.fill_(1.0);
  bias.zero_();
  running_mean.zero_();
  running_var.fill_(1.0);
  num_batches_tracked.zero_();
}

void SyncBatchNorm2dImpl::pretty_print(std::ostream& stream) const {
  stream << "engine::SyncBatchNorm2d(" << num_features << ", eps=" << eps << ", momentum=" << momentum << ")";
}

torch::Tensor SyncBatchNorm2dImpl::forward(const torch::Tensor& x) { return normalise(x, false, {}); }

torch::Tensor SyncBatchNorm2dImpl::forward_relu(const torch::Tensor& x, const torch::Tensor& residual) {
  return normalise(x, true, residual);
}

torch::Tensor SyncBatchNorm2dImpl::normalise(const torch::Tensor& x, bool relu, const torch::Tensor& residual) {
  TORCH_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-d input, got ", x.dim(), "-d");
  TORCH_CHECK(relu || !residual.defined(), "BatchNorm2d: a residual is added only before a ReLU");
  if (is_training()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  const RankSum* sum = is_training() ? current_rank_sum : nullptr;
  if (!sum && is_training() && x.is_cpu() && torch::GradMode::is_enabled())
    // LibTorch 1.13 takes no undefined tensor into a custom function: without a residual, x stands
    // in for it (`add` false: not read, no gradient).
    return BatchNormFn::apply(x, weight, bias, residual.defined() ? residual : x, running_mean, running_var, momentum,
                              eps, relu, residual.defined());
  OneThreadIf serial(!sum && x.is_cpu() && x.numel() < kSplitMinElements);
  torch::Tensor y = sum ? synced(x, *sum)
                        : torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                                            at::globalContext().userEnabledCuDNN());
  if (residual.defined()) y = y.add_(residual);
  return relu ? y.relu_() : y;
}

torch::Tensor SyncBatchNorm2dImpl::synced(const torch::Tensor& x, const RankSum& sum) {
  const auto out = SyncBatchNormFn::apply(x, weight, bias, running_mean, eps, reinterpret_cast<int64_t>(&sum));
  // The running statistics as torch updates them: the unbiased variance of the global batch.
  // Tensor ops only: no host sync per layer on a GPU.
  torch::NoGradGuard no_grad;
  const torch::Tensor& count = out[3];
  running_mean.mul_(1.0 - momentum).add_(out[1].to(running_mean.scalar_type()), momentum);
  running_var.mul_(1.0 - momentum)
      .add_((out[2] * (count / (count - 1.0).clamp_min(1.0))).to(running_var.scalar_type()), momentum);
  return out[0];
}

}  // namespace engine
