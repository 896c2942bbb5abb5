#include "engine/trainer/evaluator.h"

#include <torch/torch.h>

#include <cmath>
#include <numeric>

#include "components/models/frozen_weights.h"
#include "engine/data/sampler.h"

namespace engine {

std::vector<size_t> leading_indices(size_t size, size_t limit) {
  std::vector<size_t> out(limit > 0 ? std::min(limit, size) : size);
  std::iota(out.begin(), out.end(), size_t{0});
  return out;
}

torch::Tensor infer_logits(Model& model, const torch::Tensor& images, const Accelerator& acc) {
  model.eval();
  torch::NoGradGuard no_grad;
  auto autocast = acc.autocast();
  return model.forward(images.to(acc.device())).to(torch::kFloat).cpu();
}

Evaluator::Evaluator(Accelerator& acc, std::vector<std::unique_ptr<Metric>> metrics)
    : acc_(acc), metrics_(std::move(metrics)) {}

EvalResult Evaluator::run(Model& model, Loader& loader, const std::vector<size_t>& indices,
                          const std::string& prefix, bool labeled) {
  loader.start(eval_shard(indices, acc_.world().rank, acc_.world().world_size), 0);
  const int64_t classes = model.num_classes();
  for (auto& m : metrics_) m->reset(classes);
  std::vector<torch::Tensor> logits, labels, rows;
  Batch batch;
  {
    // No parameter changes during the pass: layers derive their packed weights once for all batches.
    FrozenWeights frozen;
    while (loader.next(batch)) {
      logits.push_back(infer_logits(model, batch.images, acc_));
      labels.push_back(batch.labels);
      rows.push_back(batch.indices);
    }
  }
  auto cat = [](std::vector<torch::Tensor>& v, torch::Tensor empty) { return v.empty() ? empty : torch::cat(v); };
  torch::Tensor local_logits = cat(logits, torch::empty({0, classes}, torch::kFloat));
  torch::Tensor local_labels = cat(labels, torch::empty({0}, torch::kLong));
  EvalResult r;
  r.indices = acc_.gather_for_metrics(cat(rows, torch::empty({0}, torch::kLong)));
  r.labels = acc_.gather_for_metrics(local_labels);
  torch::Tensor all_logits = acc_.gather_for_metrics(local_logits);
  r.probabilities = torch::softmax(all_logits, 1);
  r.predictions = all_logits.argmax(1);
  if (!labeled) return r;

  // Metrics from this rank's rows, then one all-reduce of every sum: exact whatever the shards.
  torch::Tensor local_losses = torch::nn::functional::cross_entropy(
      local_logits, local_labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  for (auto& m : metrics_) m->update(local_logits, local_labels);
  std::vector<double> sums{local_losses.sum().item<double>(), static_cast<double>(local_logits.size(0))};
  for (auto& m : metrics_) {
    auto s = m->sums();
    sums.insert(sums.end(), s.begin(), s.end());
  }
  sums = acc_.reduce_sum(sums);
  r.losses = acc_.gather_for_metrics(local_losses);
  r.values.emplace_back(prefix + "/loss", sums[1] > 0 ? sums[0] / sums[1] : NAN);
  size_t at = 2;
  for (auto& m : metrics_) {
    size_t k = m->sums().size();
    m->set_sums({sums.begin() + at, sums.begin() + at + k});
    at += k;
    r.values.emplace_back(prefix + "/" + m->name(), m->compute());
  }
  return r;
}

}  // namespace engine
