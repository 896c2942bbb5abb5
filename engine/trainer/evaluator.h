#pragma once
// Evaluation and prediction in one place (DESIGN.md, "Evaluator / Predictor"): a model, the eval
// transforms' loader and a list of samples in, logits, probabilities, metrics and per-sample rows
// out. `engine run` (validation every epoch, the final evaluation, [predict]) and `engine predict`
// (through Learner) both call it, so an exported model reproduces the run's probabilities.
//
// Sharded: each rank evaluates its contiguous shard of `indices`, rows are gathered in rank order
// (dataset order, every sample once) and metric sums are all-reduced, so the results do not depend
// on the world size.
#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "components/metrics/metric.h"
#include "components/models/model.h"
#include "engine/accelerator/accelerator.h"
#include "engine/data/loader.h"

namespace engine {

struct EvalResult {
  std::vector<std::pair<std::string, double>> values;  // "valid/loss", "valid/accuracy", ... (labeled only)
  torch::Tensor probabilities;  // [N, C] float32 softmax, in the order of `indices` (every rank)
  torch::Tensor predictions;    // [N] int64 argmax
  torch::Tensor labels;         // [N] int64, -1 when unlabeled
  torch::Tensor indices;        // [N] int64 dataset indices
  torch::Tensor losses;         // [N] float32 per-sample cross-entropy (labeled only; worst cases)
};

/// 0, 1, ..., n-1 for a dataset of `size` samples, n = min(size, limit) (limit 0 = all): what
/// prediction runs over.
std::vector<size_t> leading_indices(size_t size, size_t limit);

/// The single forward path of evaluation and prediction: eval mode, no grad, the accelerator's
/// device and precision, logits returned as fp32 on the CPU.
torch::Tensor infer_logits(Model& model, const torch::Tensor& images, const Accelerator& acc);

class Evaluator {
 public:
  explicit Evaluator(Accelerator& acc, std::vector<std::unique_ptr<Metric>> metrics = {});

  /// Evaluates `model` on `indices` of the loader's dataset. `prefix` names the values
  /// ("valid" -> "valid/loss"); with labeled == false only the rows are filled.
  EvalResult run(Model& model, Loader& loader, const std::vector<size_t>& indices, const std::string& prefix,
                 bool labeled);

 private:
  Accelerator& acc_;
  std::vector<std::unique_ptr<Metric>> metrics_;
};

}  // namespace engine
