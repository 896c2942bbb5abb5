#include "components/metrics/top_k_accuracy.h"

#include <stdexcept>

namespace engine {

TopKAccuracy::TopKAccuracy(TopKAccuracyOptions options) : options_(options) {
  if (options_.k < 1)
    throw std::invalid_argument("top_k_accuracy: k must be >= 1, got " + std::to_string(options_.k));
}

void TopKAccuracy::update(const torch::Tensor& logits, const torch::Tensor& targets) {
  check_metric_batch(name(), logits, targets, num_classes_);
  if (logits.size(0) == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor l = logits.detach();
  torch::Tensor t = targets.to(l.device(), torch::kLong);
  const int64_t classes = l.size(1);
  check_labels_in_range(name(), t, classes);
  // The rank of the target's logit, counted rather than read from torch::topk: topk's order among
  // equal values is unspecified (and differs between CPU and CUDA), which would make the metric
  // depend on the device. Counting is O(N*C), as cheap as topk for classification heads.
  torch::Tensor target_logit = l.gather(1, t.unsqueeze(1));  // [N, 1]
  torch::Tensor lower_index = torch::arange(classes, t.options()).unsqueeze(0).lt(t.unsqueeze(1));
  torch::Tensor rank = l.gt(target_logit).sum(1) + l.eq(target_logit).logical_and(lower_index).sum(1);
  // rank <= C - 1 always, so k > C needs no special case: every sample is a hit.
  torch::Tensor hit = rank.lt(options_.k).logical_and(target_logit.squeeze(1).isnan().logical_not());
  correct_ += static_cast<double>(hit.sum().item<int64_t>());
  total_ += static_cast<double>(t.size(0));
}

void register_top_k_accuracy(MetricRegistry& registry) {
  registry.add("top_k_accuracy",
               "fraction of samples whose target is among the k largest logits (k > classes counts as "
               "top-classes; NaN with no samples)",
               [](Options& o) -> MetricRegistry::Factory {
                 TopKAccuracyOptions opt;
                 opt.k = o.integer("k", opt.k, "how many of the largest logits may hold the target", 1);
                 return [opt]() { return std::make_unique<TopKAccuracy>(opt); };
               });
}

}  // namespace engine
