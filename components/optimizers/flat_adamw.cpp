#include "components/optimizers/flat_adamw.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <memory>
#include <utility>

#include "components/optimizers/optimizer_util.h"

namespace engine {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

namespace {

bool dense(const torch::Tensor& t) { return t.layout() == torch::kStrided && t.is_non_overlapping_and_dense(); }

// `t` already is this view of the arena (same memory, same geometry).
bool is_view(const torch::Tensor& t, const torch::Tensor& view) {
  return t.defined() && t.data_ptr() == view.data_ptr() && t.sizes() == view.sizes() &&
         t.strides() == view.strides() && t.scalar_type() == view.scalar_type();
}

// Moves a tensor's values into its arena view and returns the view (no-op when it already is).
torch::Tensor adopt(const torch::Tensor& t, const torch::Tensor& view) {
  if (is_view(t, view)) return view;
  if (t.defined()) view.copy_(t.detach());
  else view.zero_();
  return view;
}

}  // namespace

FlatAdamW::FlatAdamW(std::vector<torch::optim::OptimizerParamGroup> groups, AdamWOptions defaults)
    : AdamW(std::move(groups), std::move(defaults)) {}

bool FlatAdamW::arena_matches() const {
  size_t n = 0;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    const auto& params = param_groups()[g].params();
    if (g >= slots_.size() || params.size() != slots_[g].size()) return false;
    for (size_t i = 0; i < params.size(); ++i, ++n) {
      const auto& p = params[i];
      const auto& v = slots_[g][i].param;
      if (n >= layout_.size() || layout_[n] != p.unsafeGetTensorImpl() || p.sizes() != v.sizes() ||
          p.strides() != v.strides() || p.scalar_type() != v.scalar_type() || p.device() != v.device())
        return false;
    }
  }
  return n == layout_.size() && slots_.size() == param_groups().size();
}

void FlatAdamW::build_arena() {
  layout_.clear();
  slots_.clear();
  range_.clear();
  int64_t total = 0;
  const torch::Tensor* first = nullptr;
  for (const auto& group : param_groups())
    for (const auto& p : group.params()) {
      if (!dense(p) || (first && (p.scalar_type() != first->scalar_type() || p.device() != first->device()))) {
        no_arena_ = true;  // mixed dtypes or devices, or an odd layout: torch's per-parameter update
        return;
      }
      if (!first) first = &p;
      total += p.numel();
    }
  if (!first) {
    no_arena_ = true;
    return;
  }
  torch::NoGradGuard no_grad;
  const auto options = first->options().requires_grad(false);
  params_ = torch::empty({total}, options);
  grads_ = torch::zeros({total}, options);
  exp_avg_ = torch::zeros({total}, options);
  exp_avg_sq_ = torch::zeros({total}, options);
  int64_t offset = 0;
  for (auto& group : param_groups()) {
    const int64_t begin = offset;
    slots_.emplace_back();
    for (auto& p : group.params()) {
      // Aliases of the arena's memory, not autograd views of it: torch's zero_grad() detaches
      // gradients in place, which views refuse.
      auto view = [&](const torch::Tensor& arena) {
        return torch::empty({0}, options).set_(arena.storage(), offset, p.sizes(), p.strides());
      };
      Slot s{view(params_), view(grads_), view(exp_avg_), view(exp_avg_sq_)};
      // The parameter now lives in the arena (same values, same strides); its gradient too, once
      // it has one (a frozen parameter keeps none, so the step still skips it as torch does).
      p.set_data(adopt(p, s.param));
      if (p.grad().defined()) p.mutable_grad() = adopt(p.grad(), s.grad);
      auto it = state_.find(optim_detail::state_key(state_, p));
      if (it != state_.end()) {
        auto& st = static_cast<AdamWParamState&>(*it->second);
        st.exp_avg(adopt(st.exp_avg(), s.exp_avg));
        st.exp_avg_sq(adopt(st.exp_avg_sq(), s.exp_avg_sq));
      }
      slots_.back().push_back(std::move(s));
      layout_.push_back(p.unsafeGetTensorImpl());
      offset += p.numel();
    }
    range_.emplace_back(begin, offset);
  }
}

bool FlatAdamW::make_group_flat(size_t g) {
  auto& group = param_groups()[g];
  if (static_cast<AdamWOptions&>(group.options()).amsgrad()) return false;
  int64_t step = -1;
  for (const auto& p : group.params()) {
    if (!p.grad().defined()) return false;  // frozen or unused this step: torch skips it
    auto it = state_.find(optim_detail::state_key(state_, p));
    const int64_t s = it == state_.end() ? 0 : static_cast<AdamWParamState&>(*it->second).step();
    if (step >= 0 && s != step) return false;  // parameters at different steps: per parameter
    step = s;
  }
  // Everything in its arena view again (a checkpoint load, a new .grad, a set_data since the
  // last step), and a fresh state where torch would create one: step 0, zero moments.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < group.params().size(); ++i) {
    auto& p = group.params()[i];
    Slot& s = slots_[g][i];
    if (!is_view(p, s.param)) p.set_data(adopt(p, s.param));
    if (!is_view(p.grad(), s.grad)) p.mutable_grad() = adopt(p.grad(), s.grad);
    auto key = optim_detail::state_key(state_, p);
    auto it = state_.find(key);
    if (it == state_.end()) {
      auto st = std::make_unique<AdamWParamState>();
      st->step(0);
      st->exp_avg(adopt(torch::Tensor(), s.exp_avg));
      st->exp_avg_sq(adopt(torch::Tensor(), s.exp_avg_sq));
      state_[key] = std::move(st);
    } else {
      auto& st = static_cast<AdamWParamState&>(*it->second);
      st.exp_avg(adopt(st.exp_avg(), s.exp_avg));
      st.exp_avg_sq(adopt(st.exp_avg_sq(), s.exp_avg_sq));
    }
  }
  return true;
}

void FlatAdamW::step_group_flat(size_t g) {
  auto& group = param_groups()[g];
  const auto& o = static_cast<AdamWOptions&>(group.options());
  const auto [begin, end] = range_[g];
  if (end == begin) return;
  torch::Tensor p = params_.narrow(0, begin, end - begin), grad = grads_.narrow(0, begin, end - begin),
                exp_avg = exp_avg_.narrow(0, begin, end - begin), exp_avg_sq = exp_avg_sq_.narrow(0, begin, end - begin);
  int64_t step = 0;
  for (const auto& q : group.params()) {
    auto& st = static_cast<AdamWParamState&>(*state_.at(optim_detail::state_key(state_, q)));
    step = st.step() + 1;
    st.step(step);
  }
  // torch's AdamW, op for op, on the whole group at once.
  if (o.weight_decay() != 0) p.mul_(1 - o.lr() * o.weight_decay());
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  exp_avg.mul_(beta1).add_(grad, 1 - beta1);
  exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  torch::Tensor denom = (exp_avg_sq.sqrt() / std::sqrt(bias_correction2)).add_(o.eps());
  p.addcdiv_(exp_avg, denom, -o.lr() / bias_correction1);
}

torch::Tensor FlatAdamW::step(LossClosure closure) {
  flat_groups_ = 0;
  if (closure || no_arena_) return AdamW::step(std::move(closure));
  if (!arena_matches()) build_arena();
  if (no_arena_) return AdamW::step(nullptr);
  for (size_t g = 0; g < param_groups().size(); ++g)
    if (!make_group_flat(g)) return AdamW::step(nullptr);  // e.g. a frozen stage: torch's update for all
  torch::NoGradGuard no_grad;
  for (size_t g = 0; g < param_groups().size(); ++g) step_group_flat(g);
  flat_groups_ = static_cast<int64_t>(param_groups().size());
  return {};
}

}  // namespace engine
