#pragma once
// top_k_accuracy: fraction of samples whose target is among the k largest logits (timm's acc@5).
// Sums are {hits, total}, like accuracy, so ranks reduce it exactly.
// Ties are broken as in accuracy (torch::argmax): among equal logits the lower class index ranks
// first. So the target's rank is #{classes with a larger logit} + #{lower classes with an equal
// logit}, a hit is rank < k, and top_k_accuracy with k = 1 equals accuracy on every input. A
// sample whose target logit is NaN is never a hit.
// k larger than the class count counts as top-num_classes: every sample is a hit (value 1).
#include <cstdint>
#include <string>

#include "components/metrics/accuracy.h"

namespace engine {

struct TopKAccuracyOptions {
  int64_t k = 5;  // >= 1
};

class TopKAccuracy : public Accuracy {
 public:
  explicit TopKAccuracy(TopKAccuracyOptions options = {});
  std::string name() const override { return "top_k_accuracy"; }
  /// logits [N, C], targets [N] in [0, C) (else UserError), any device and floating dtype.
  void update(const torch::Tensor& logits, const torch::Tensor& targets) override;
  int64_t k() const { return options_.k; }

 private:
  TopKAccuracyOptions options_;
};

void register_top_k_accuracy(MetricRegistry& registry);

}  // namespace engine
