#include "engine/trainer/phases.h"

#include <torch/torch.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "components/models/batch_norm.h"
#include "components/models/layers.h"
#include "components/schedulers/one_cycle.h"

namespace engine {

FineTuneOptions FineTuneOptions::read(Options& o) {
  FineTuneOptions f;
  f.enabled = true;
  f.freeze_epochs = o.integer("freeze_epochs", f.freeze_epochs, "epochs with the body frozen, head only (fastai: 1)", 0);
  f.base_lr = o.number("base_lr", f.base_lr, "peak lr of the head; the unfrozen phase uses base_lr / 2 (fastai: 2e-3)", 0);
  if (!o.describing() && !(f.base_lr > 0)) o.error("base_lr", "must be > 0", "fastai's default is 2e-3");
  f.lr_mult = o.number("lr_mult", f.lr_mult, "unfrozen phase: first stage lr = head lr / lr_mult (fastai: 100)", 1);
  f.pct_start = o.number("pct_start", f.pct_start, "unfrozen phase one-cycle warm-up fraction (fastai: 0.3)", 0, 1);
  f.div = o.number("div", f.div, "unfrozen phase one-cycle initial lr = peak / div (fastai: 5)", 1);
  return f;
}

std::vector<double> even_mults(double a, double b, size_t n) {
  if (n == 1) return {b};
  std::vector<double> out(n);
  const double step = std::pow(b / a, 1.0 / static_cast<double>(n - 1));
  for (size_t i = 0; i < n; ++i) out[i] = a * std::pow(step, static_cast<double>(i));
  out.back() = b;
  return out;
}

std::vector<Phase> make_phases(const FineTuneOptions& ft, int64_t epochs, std::shared_ptr<const Scheduler> scheduler,
                               size_t num_stages) {
  if (!ft.enabled) return {Phase{"train", epochs, 0, {}, std::move(scheduler)}};
  std::vector<Phase> phases;
  auto one_cycle = [](double pct_start, double div) {
    OneCycleOptions o;
    o.pct_start = pct_start;
    o.div = div;
    return std::make_shared<OneCycleScheduler>(o);
  };
  // Frozen: fit_one_cycle(freeze_epochs, slice(base_lr), pct_start=0.99) with fastai's div = 25.
  std::vector<double> frozen_lr(num_stages, ft.base_lr / 10);
  frozen_lr.back() = ft.base_lr;
  if (ft.freeze_epochs > 0)
    phases.push_back(Phase{"frozen", ft.freeze_epochs, static_cast<int64_t>(num_stages) - 1, frozen_lr,
                           one_cycle(0.99, 25.0)});
  const double lr = ft.base_lr / 2;
  if (epochs > 0)
    phases.push_back(Phase{"unfrozen", epochs, 0, even_mults(lr / ft.lr_mult, lr, num_stages),
                           one_cycle(ft.pct_start, ft.div)});
  return phases;
}

bool is_norm_module(const torch::nn::Module& m) {
  return m.as<torch::nn::BatchNorm2dImpl>() || m.as<SyncBatchNorm2dImpl>() || m.as<torch::nn::BatchNorm1dImpl>() ||
         m.as<torch::nn::LayerNormImpl>() || m.as<LayerNormImpl>() || m.as<torch::nn::GroupNormImpl>();
}

namespace {
// Names of the parameters that belong to normalisation layers.
std::set<std::string> norm_parameters(Model& model) {
  std::set<std::string> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false))
    if (is_norm_module(*m.value()))
      for (const auto& p : m.value()->named_parameters(/*recurse=*/false)) out.insert(m.key() + "." + p.key());
  return out;
}
}  // namespace

StagedGroups staged_param_groups(Model& model) {
  const auto stages = model.stages();
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> per_stage(stages.size());
  for (const auto& p : model.named_parameters()) {
    int s = stage_of(stages, p.key());
    if (s < 0) throw std::logic_error("parameter " + p.key() + " belongs to no stage of the model's stages()");
    per_stage[static_cast<size_t>(s)].emplace_back(p.key(), p.value());
  }
  StagedGroups out;
  for (size_t s = 0; s < stages.size(); ++s) {
    for (auto& g : decay_groups(per_stage[s])) {
      g.name = stages[s].name + "/" + g.name;
      out.groups.push_back(std::move(g));
      out.stage_of_group.push_back(s);
    }
  }
  return out;
}

std::vector<torch::Tensor> apply_freeze(Model& model, int64_t frozen_stages) {
  const auto stages = model.stages();
  const auto norms = norm_parameters(model);
  std::vector<torch::Tensor> trainable;
  for (auto& p : model.named_parameters()) {
    const bool frozen = stage_of(stages, p.key()) < frozen_stages && !norms.count(p.key());
    p.value().set_requires_grad(!frozen);
    if (frozen) {
      if (p.value().grad().defined()) p.value().mutable_grad() = torch::Tensor();
    } else {
      trainable.push_back(p.value());
    }
  }
  return trainable;
}

}  // namespace engine
