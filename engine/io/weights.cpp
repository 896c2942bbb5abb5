#include "engine/io/weights.h"

#include <torch/torch.h>

#include <map>

#include "engine/core/errors.h"

namespace engine {

// PyTorch's state_dict order: the root's own tensors, then every submodule in pre-order, each
// with its parameters before its buffers. named_modules(include_self=true) needs the root to be
// owned by a shared_ptr (models come from factories as unique_ptr), so the root is done by hand.
NamedTensors state_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  auto add = [&](const std::string& prefix, const torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false))
      if (p.value().defined()) out.emplace_back(prefix + p.key(), p.value());
    for (const auto& b : m.named_buffers(/*recurse=*/false))
      if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value());
  };
  add("", module);
  for (const auto& m : module.named_modules("", /*include_self=*/false)) add(m.key() + ".", *m.value());
  return out;
}

std::string shape_text(torch::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

NamedTensors model_tensors_live(const torch::nn::Module& module) {
  NamedTensors out;
  for (auto& [key, t] : state_tensors(module))
    out.emplace_back(key, t.is_floating_point() ? t.detach().to(torch::kFloat) : t.detach());
  return out;
}

NamedTensors model_tensors(const torch::nn::Module& module) {
  NamedTensors out = model_tensors_live(module);
  // clone(): a copy even when t is already CPU fp32 contiguous, so later training steps never
  // change what the caller is about to write.
  for (auto& [key, t] : out) t = t.to(torch::kCPU).contiguous().clone();
  return out;
}

void load_weights(torch::nn::Module& module, const NamedTensors& tensors, const std::string& source,
                  const WeightHint& hint) {
  NamedTensors targets = state_tensors(module);
  std::map<std::string, const torch::Tensor*> file;
  for (const auto& [k, t] : tensors) file[k] = &t;
  std::map<std::string, const torch::Tensor*> model;
  for (const auto& [k, t] : targets) model[k] = &t;

  // Collect every problem first: one run of the program should show the user the whole list.
  std::vector<std::string> problems;
  auto report = [&](const std::string& key, std::string what, const torch::Tensor* f,
                    const torch::Tensor* m) {
    if (hint) {
      std::string h = hint(key, f, m);
      if (!h.empty()) what += " (" + h + ")";
    }
    problems.push_back(key + ": " + what);
  };
  for (const auto& [key, t] : targets) {
    auto it = file.find(key);
    if (it == file.end()) {
      report(key, "missing from the file", nullptr, &t);
      continue;
    }
    const torch::Tensor& f = *it->second;
    if (f.sizes() != t.sizes()) {
      report(key,
             "shape " + shape_text(f.sizes()) + " in the file, " + shape_text(t.sizes()) + " in the model",
             &f, &t);
    } else if (f.scalar_type() != t.scalar_type() && !(f.is_floating_point() && t.is_floating_point())) {
      report(key,
             std::string("dtype ") + c10::toString(f.scalar_type()) + " in the file cannot load into " +
                 c10::toString(t.scalar_type()),
             &f, &t);
    }
  }
  for (const auto& [key, t] : tensors)
    if (!model.count(key)) report(key, "unexpected key (not in the model)", &t, nullptr);

  if (!problems.empty()) {
    std::string msg = source + ": weights do not match the model (" + std::to_string(problems.size()) +
                      " problem" + (problems.size() > 1 ? "s" : "") + "):";
    const size_t shown = 20;  // a wrong architecture mismatches hundreds of keys: show the start
    for (size_t i = 0; i < problems.size() && i < shown; ++i) msg += "\n  " + problems[i];
    if (problems.size() > shown) msg += "\n  ... and " + std::to_string(problems.size() - shown) + " more";
    throw UserError(msg);
  }
  // copy_ converts dtype (an fp16 checkpoint into fp32 parameters) and keeps the parameter's own
  // memory format (channels-last stays channels-last) and device.
  torch::NoGradGuard no_grad;
  for (auto& [key, t] : targets) t.copy_(*file.at(key));
}

void load_weights(torch::nn::Module& module, const std::string& safetensors_path, const WeightHint& hint) {
  load_weights(module, load_safetensors(safetensors_path).tensors, safetensors_path, hint);
}

}  // namespace engine
