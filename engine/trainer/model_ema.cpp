#include "engine/trainer/model_ema.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "engine/core/errors.h"
#include "engine/io/weights.h"

namespace engine {
namespace {

std::string tensor_text(const torch::Tensor& t) {
  std::ostringstream s;
  s << c10::toString(t.scalar_type()) << " " << t.sizes() << " on " << t.device();
  return s.str();
}

}  // namespace

ModelEma::ModelEma(const torch::nn::Module& model, double decay, bool warmup)
    : ModelEma(model, ModelEmaOptions{decay, warmup}) {}

ModelEma::ModelEma(const torch::nn::Module& model, const ModelEmaOptions& options) : options_(options) {
  if (!(options_.decay >= 0 && options_.decay <= 1))
    throw std::invalid_argument("ModelEma: decay must be in [0, 1], got " + std::to_string(options_.decay) +
                                " (timm's default is 0.9998)");
  torch::NoGradGuard no_grad;
  for (auto& [key, t] : state_tensors(model)) {
    // clone() keeps the memory format (channels-last stays channels-last) and the device, so the
    // EMA's values can be copied into the model and back without layout conversions.
    torch::Tensor c = t.detach().clone();
    (c.is_floating_point() ? floating_ : non_floating_).push_back(ema_.size());
    ema_.emplace_back(key, c);
  }
}

double ModelEma::decay_at(int64_t step) const {
  if (!options_.warmup) return options_.decay;
  double s = static_cast<double>(std::max<int64_t>(step, 0));
  return std::min(options_.decay, (1 + s) / (10 + s));
}

std::vector<torch::Tensor> ModelEma::matching(const torch::nn::Module& model, const char* caller) const {
  NamedTensors m = state_tensors(model);
  std::vector<std::string> problems;
  if (m.size() != ema_.size())
    problems.push_back("the model has " + std::to_string(m.size()) + " parameters and buffers, the EMA " +
                       std::to_string(ema_.size()));
  for (size_t i = 0; i < std::min(m.size(), ema_.size()) && problems.size() < 5; ++i) {
    const auto& [ek, et] = ema_[i];
    const auto& [mk, mt] = m[i];
    if (ek != mk)
      problems.push_back("tensor " + std::to_string(i) + " is \"" + mk + "\" in the model, \"" + ek +
                         "\" in the EMA");
    else if (et.sizes() != mt.sizes() || et.scalar_type() != mt.scalar_type() || et.device() != mt.device())
      problems.push_back(ek + ": " + tensor_text(mt) + " in the model, " + tensor_text(et) + " in the EMA");
  }
  if (!problems.empty()) {
    std::string msg =
        std::string("ModelEma::") + caller + ": the model does not match the EMA copy made from it";
    for (const auto& p : problems) msg += "\n  " + p;
    msg +=
        "\n  (build the ModelEma after the model is moved to its device and dtype, and pass the same model)";
    throw std::invalid_argument(msg);
  }
  std::vector<torch::Tensor> out;
  out.reserve(m.size());
  for (auto& [k, t] : m) out.push_back(t);
  return out;
}

void ModelEma::update(const torch::nn::Module& model, int64_t step) {
  std::vector<torch::Tensor> m = matching(model, "update");
  const double d = decay_at(step);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> e_f, m_f;
  e_f.reserve(floating_.size());
  m_f.reserve(floating_.size());
  for (size_t i : floating_) {
    e_f.push_back(ema_[i].second);
    m_f.push_back(m[i].detach());
  }
  // ema = d * ema + (1 - d) * model, written as timm writes it (not lerp_, which rounds as
  // ema + w * (model - ema)). The _foreach_ kernels do all tensors in a few launches on CUDA
  // instead of two per tensor: a ConvNeXt has hundreds of small ones.
  if (!e_f.empty()) {
    at::_foreach_mul_(e_f, d);
    at::_foreach_add_(e_f, m_f, 1.0 - d);
  }
  for (size_t i : non_floating_) ema_[i].second.copy_(m[i]);
}

void ModelEma::set(const torch::nn::Module& model) {
  std::vector<torch::Tensor> m = matching(model, "set");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_.size(); ++i) ema_[i].second.copy_(m[i]);
}

void ModelEma::swap_into(torch::nn::Module& model) {
  std::vector<torch::Tensor> m = matching(model, "swap_into");
  // Values are exchanged through copy_ rather than by swapping tensor handles: the optimizer and
  // any DDP hooks hold the model's tensors, which must stay the same objects. One temporary at a
  // time keeps the extra memory to the largest single tensor.
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < ema_.size(); ++i) {
    torch::Tensor tmp = m[i].detach().clone();
    m[i].copy_(ema_[i].second);
    ema_[i].second.copy_(tmp);
  }
}

NamedTensors ModelEma::state() const {
  NamedTensors out;
  out.reserve(ema_.size());
  for (const auto& [k, t] : ema_) out.emplace_back(k, t.detach().to(torch::kCPU).contiguous().clone());
  return out;
}

void ModelEma::load_state(const NamedTensors& tensors) {
  std::map<std::string, const torch::Tensor*> given;
  for (const auto& [k, t] : tensors) given[k] = &t;
  std::map<std::string, bool> known;
  for (const auto& [k, t] : ema_) known[k] = true;
  std::vector<std::string> problems;
  for (const auto& [k, t] : ema_) {
    auto it = given.find(k);
    if (it == given.end()) {
      problems.push_back(k + ": missing from the EMA state");
      continue;
    }
    const torch::Tensor& g = *it->second;
    if (g.sizes() != t.sizes() ||
        (g.scalar_type() != t.scalar_type() && !(g.is_floating_point() && t.is_floating_point())))
      problems.push_back(k + ": " + tensor_text(g) + " in the state cannot load into the EMA's " +
                         tensor_text(t));
  }
  for (const auto& [k, t] : tensors)
    if (!known.count(k)) problems.push_back(k + ": unexpected key (not in the model)");
  if (!problems.empty()) {
    std::string msg = "EMA state does not match the model (" + std::to_string(problems.size()) + " problem" +
                      (problems.size() > 1 ? "s" : "") + "):";
    for (size_t i = 0; i < problems.size() && i < 20; ++i) msg += "\n  " + problems[i];
    if (problems.size() > 20) msg += "\n  ... and " + std::to_string(problems.size() - 20) + " more";
    msg += "\n  (was the checkpoint written by a run with a different model or num_classes?)";
    throw UserError(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [k, t] : ema_) t.copy_(*given.at(k));
}

}  // namespace engine
