#pragma once
// Shared by the model tests: options without TOML, a seeded resnet, parameter counts, UserError
// messages, tensor differences and the oneDNN switch.
#include <ATen/Context.h>
#include <torch/torch.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include "components/models/backbone_options.h"
#include "components/models/model.h"
#include "components/models/resnet.h"
#include "engine/core/errors.h"
#include "engine/recipe/options.h"

namespace engine::test {

/// [model] options of any backbone (ResNetOptions and ConvNeXtOptions are the same struct).
inline BackboneOptions opts(int64_t in_chans, int64_t num_classes, bool channels_last = true) {
  BackboneOptions o;
  o.in_chans = in_chans;
  o.num_classes = num_classes;
  o.channels_last = channels_last;
  return o;
}

/// make_resnet(name, o) after torch::manual_seed(seed): the same seed gives the same weights.
inline std::unique_ptr<ResNet> seeded_resnet(uint64_t seed, const ResNetOptions& o,
                                             const std::string& name = "resnet18") {
  torch::manual_seed(seed);
  return make_resnet(name, o);
}

/// max |a - b| relative to max |b|: how far a fast kernel's result is from the torch op's.
inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / (1e-6 + b.abs().max().item<double>());
}

/// oneDNN's switch set for a scope, then put back: `MkldnnSwitch off(false)` makes torch::conv2d
/// LibTorch's own kernels, the reference a wrong oneDNN kernel cannot move (onednn_convs.h).
struct MkldnnSwitch {
  bool before = at::globalContext().userEnabledMkldnn();
  explicit MkldnnSwitch(bool on) { at::globalContext().setUserEnabledMkldnn(on); }
  ~MkldnnSwitch() { at::globalContext().setUserEnabledMkldnn(before); }
  MkldnnSwitch(const MkldnnSwitch&) = delete;
  MkldnnSwitch& operator=(const MkldnnSwitch&) = delete;
};

inline int64_t count_params(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

/// The message of the UserError that `f` throws; "(no error)" when it throws none.
inline std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

/// Equal element for element, bit for bit (torch::equal), or both undefined.
inline bool same_bits(const torch::Tensor& a, const torch::Tensor& b) {
  return a.defined() == b.defined() && (!a.defined() || torch::equal(a, b));
}

/// Largest absolute difference, compared in fp32 (either side may be bf16).
inline double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat) - b.to(torch::kFloat)).abs().max().item<double>();
}

/// What the model registry made of a recipe's [model] table.
struct ParsedModel {
  ModelRegistry::Factory factory;   // empty when the table was refused
  std::vector<std::string> errors;  // the recipe's diagnostics, every problem at once
};

/// Writes `toml` to `file`, then parses its [model] table through `registry` as a recipe does.
inline ParsedModel parse_model_table(const ModelRegistry& registry, const std::string& file,
                                     const std::string& toml) {
  std::ofstream(file) << toml;
  RecipeDocument doc(file, {});
  Options root = doc.root();
  Options model = root.table("model", "");
  ParsedModel out{registry.parse(model), {}};
  doc.finish();
  out.errors = doc.diagnostics().lines();
  return out;
}

}  // namespace engine::test
