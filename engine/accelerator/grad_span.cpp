#include "engine/accelerator/grad_span.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#include "components/models/gradient_memory.h"

namespace engine {

std::optional<torch::Tensor> single_span(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return std::nullopt;
  const auto& first = tensors.front();
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [storage offset, numel], in elements
  ranges.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (!t.defined() || t.layout() != torch::kStrided || !t.is_non_overlapping_and_dense() ||
        t.scalar_type() != first.scalar_type() || !t.has_storage() ||
        !t.storage().is_alias_of(first.storage()))
      return std::nullopt;
    // A dense tensor with non-negative strides occupies [offset, offset + numel) of its storage.
    for (int64_t s : t.strides())
      if (s < 0) return std::nullopt;
    ranges.emplace_back(t.storage_offset(), t.numel());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first != ranges[i - 1].first + ranges[i - 1].second) return std::nullopt;
  const int64_t total = ranges.back().first + ranges.back().second - ranges.front().first;
  torch::NoGradGuard no_grad;
  return torch::empty({0}, first.options().requires_grad(false)).set_(first.storage(), ranges.front().first, {total}, {1});
}

void zero_grads(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  torch::NoGradGuard no_grad;
  if (auto span = single_span(grads)) {
    span->zero_();
    return;
  }
  for (auto& g : grads) g.zero_();
}

void StepGradients::begin(const std::vector<torch::Tensor>& params) {
  kept_.clear();
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) grads.push_back(p.grad());
  if (!single_span(grads)) {
    zero_grads(params);
    return;
  }
  kept_ = std::move(grads);
  for (const auto& p : params) p.mutable_grad() = torch::Tensor();
  open_gradient_memory(params, kept_);
}

void StepGradients::end(const std::vector<torch::Tensor>& params) {
  if (kept_.empty()) return;
  close_gradient_memory();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& fresh = params[i].grad();
    const bool in_place = fresh.defined() && fresh.data_ptr() == kept_[i].data_ptr() &&
                          fresh.strides() == kept_[i].strides();  // written there (claim_gradient_memory)
    if (!fresh.defined())
      kept_[i].zero_();
    else if (!in_place)
      kept_[i].copy_(fresh);
    params[i].mutable_grad() = kept_[i];
  }
  kept_.clear();
}

}  // namespace engine
