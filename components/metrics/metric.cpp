#include "components/metrics/metric.h"

#include <sstream>
#include <stdexcept>

#include "engine/core/errors.h"

namespace engine {

void check_metric_batch(const std::string& metric, const torch::Tensor& logits, const torch::Tensor& targets,
                        int64_t num_classes) {
  bool ok = logits.dim() == 2 && targets.dim() == 1 && logits.size(0) == targets.size(0);
  // A class-count mismatch means the evaluator's num_classes and the model disagree: a bug in the
  // caller, not in the data, so it is an invalid_argument rather than a UserError.
  if (ok && num_classes > 0 && logits.size(1) != num_classes) ok = false;
  if (!ok) {
    std::ostringstream s;
    s << metric << ": expected logits [N, C] and targets [N]";
    if (num_classes > 0) s << " with C = " << num_classes << " (the value given to reset)";
    s << ", got " << logits.sizes() << " and " << targets.sizes();
    throw std::invalid_argument(s.str());
  }
}

void check_num_classes(const std::string& metric, int64_t num_classes) {
  if (num_classes < 1)
    throw std::invalid_argument(metric + ": reset(num_classes) needs num_classes >= 1, got " +
                                std::to_string(num_classes));
}

void check_labels_in_range(const std::string& what, const torch::Tensor& labels, int64_t num_classes) {
  if (labels.numel() == 0) return;
  // One sync for the common case (all in range); the offending value is looked up only on error.
  torch::Tensor bad = labels.lt(0).logical_or(labels.ge(num_classes));
  if (!bad.any().item<bool>()) return;
  int64_t label = labels.masked_select(bad)[0].item<int64_t>();
  throw UserError(what + ": label " + std::to_string(label) + " is outside [0, " +
                  std::to_string(num_classes) +
                  ") (the model has num_classes = " + std::to_string(num_classes) +
                  "); make model.num_classes match the dataset's labels, or fix the labels");
}

}  // namespace engine
