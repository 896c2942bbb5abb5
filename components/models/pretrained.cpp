#include "components/models/pretrained.h"

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <set>

#include "engine/core/errors.h"
#include "engine/core/text.h"
#include "engine/io/weights.h"

namespace engine {
namespace {

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// timm's adapt_input_conv(in_chans, weight) for a [O, I, kh, kw] weight. Returns an undefined
// tensor (and says why) in the cases where timm gives up (it then re-initialises the layer; the
// engine refuses instead: a silently random first conv is not what `pretrained` asks for).
torch::Tensor adapt_input_conv(int64_t in_chans, const torch::Tensor& weight, std::string& how,
                               std::string& why) {
  // In fp32 whatever the file's dtype (timm: half sums are slow or missing on CPU), then back.
  torch::Tensor w = weight.to(torch::kFloat);
  const int64_t o = w.size(0), i = w.size(1), kh = w.size(2), kw = w.size(3);
  if (in_chans == 1) {
    if (i > 3) {
      if (i % 3 != 0) {
        why = "timm adapts a first conv to 1 channel only from 3 (RGB) or a multiple of 3 input channels";
        return {};
      }
      // A space-to-depth stem: RGB triples side by side; each triple is summed.
      w = w.reshape({o, i / 3, 3, kh, kw}).sum(2);
      how = "sum over each RGB triple, as timm";
    } else {
      w = w.sum(1, /*keepdim=*/true);
      how = "sum over RGB, as timm";
    }
  } else if (in_chans != 3 && i == 3) {
    // RGB repeated to cover in_chans, cut, and scaled so that the activations keep their size.
    const int64_t repeat = (in_chans + 2) / 3;
    w = w.repeat({1, repeat, 1, 1}).slice(1, 0, in_chans).contiguous();
    w.mul_(3.0 / static_cast<double>(in_chans));
    how = "RGB repeated and scaled by 3/" + std::to_string(in_chans) + ", as timm";
  } else {
    why = "timm adapts a first conv only from 3 (RGB) input channels (to 1 by summing, to N by repeating)";
    return {};
  }
  return w.to(weight.scalar_type());
}

// "122 keys missing, e.g. conv1.weight"
std::string count_with_example(const std::vector<std::string>& items, const std::string& what) {
  return std::to_string(items.size()) + " " + what + ", e.g. " + items.front();
}

// A checkpoint of another architecture mismatches most keys: one line with counts and a first
// example of each kind, instead of hundreds of lines. Decided on the file as it is, with the keys
// that load_pretrained adapts (`adaptable`: first conv, classifier) and the optional BatchNorm
// step counters left out of the decision; the counts shown are the plain facts.
void check_architecture(const Model& model, const std::string& path, const NamedTensors& tensors,
                        const NamedTensors& targets, const std::set<std::string>& adaptable) {
  std::map<std::string, const torch::Tensor*> file;
  for (const auto& [k, t] : tensors) file[k] = &t;
  std::set<std::string> mine;
  for (const auto& kv : targets) mine.insert(kv.first);
  std::vector<std::string> missing, unexpected, reshaped;
  size_t considered = 0, matched = 0, problems = 0;
  for (const auto& [k, t] : targets) {
    const bool counts = !adaptable.count(k) && !has_suffix(k, ".num_batches_tracked");
    considered += counts;
    auto it = file.find(k);
    if (it == file.end()) {
      missing.push_back(k);
      problems += counts;
    } else if (it->second->sizes() != t.sizes() && !adaptable.count(k)) {
      reshaped.push_back(k + " " + shape_text(it->second->sizes()) + " in the file, " +
                         shape_text(t.sizes()) + " in the model");
      problems += counts;
    } else {
      matched += counts;
    }
  }
  for (const auto& [k, t] : tensors)
    if (!mine.count(k)) {
      unexpected.push_back(k);
      problems += !adaptable.count(k);
    }
  // More than a handful of problems and under 90% of the model's keys found: not a near miss.
  if (problems <= 10 || matched * 10 >= considered * 9) return;
  std::vector<std::string> parts;
  if (!missing.empty()) parts.push_back(count_with_example(missing, "keys missing"));
  if (!unexpected.empty()) parts.push_back(count_with_example(unexpected, "unexpected"));
  if (!reshaped.empty()) parts.push_back(count_with_example(reshaped, "of another shape"));
  throw UserError(path + ": looks like a checkpoint of another architecture than " + model.name() +
                  " (in_chans = " + std::to_string(model.in_chans()) +
                  ", num_classes = " + std::to_string(model.num_classes()) + "): " + join(parts, "; ") +
                  ". The file has " + std::to_string(tensors.size()) + " tensors, the model " +
                  std::to_string(targets.size()) + ": check [model] name against the checkpoint");
}

}  // namespace

std::string load_pretrained(Model& model, const std::string& path) {
  NamedTensors tensors = load_safetensors(path).tensors;
  // The model's keys in timm's state_dict order, with copies of its values (for the tensors that
  // stand in for the file's, below).
  const NamedTensors targets = model_tensors(model);
  std::map<std::string, torch::Tensor> mine(targets.begin(), targets.end());
  auto find = [&](const std::string& key) -> torch::Tensor* {
    for (auto& [k, t] : tensors)
      if (k == key) return &t;
    return nullptr;
  };
  const std::string conv_key = model.first_conv() + ".weight";
  const std::string cls = model.classifier(), cls_w = cls + ".weight", cls_b = cls + ".bias";
  check_architecture(model, path, tensors, targets, {conv_key, cls_w, cls_b});

  std::vector<std::string> adapted;
  std::string conv_refused;  // why the first conv could not be adapted (reported with the rest)

  // 1. The first conv: another input channel count is adapted as timm's adapt_input_conv does.
  // (timm adapts whenever the model's in_chans is not 3; adapting only on a real mismatch also
  // loads a 1-channel checkpoint of our own into a 1-channel model unchanged.)
  torch::Tensor* fconv = find(conv_key);
  auto mconv = mine.find(conv_key);
  if (fconv && mconv != mine.end() && fconv->dim() == 4 && mconv->second.dim() == 4) {
    const torch::Tensor& m = mconv->second;
    if (fconv->size(1) != m.size(1) && fconv->size(0) == m.size(0) && fconv->size(2) == m.size(2) &&
        fconv->size(3) == m.size(3)) {
      std::string how;
      torch::Tensor w = adapt_input_conv(model.in_chans(), *fconv, how, conv_refused);
      if (w.defined() && w.sizes() == m.sizes()) {
        adapted.push_back(conv_key + " adapted " + std::to_string(fconv->size(1)) + " -> " +
                          std::to_string(w.size(1)) + " input channels (" + how + ")");
        *fconv = w;
      } else if (w.defined()) {
        conv_refused = "timm's adaptation gives " + shape_text(w.sizes());
      }
      if (!conv_refused.empty())
        conv_refused +=
            ": set [model] in_chans = " + std::to_string(fconv->size(1)) + " to use this file as is";
    }
  }

  // 2. The classifier: when the class counts differ (a file or a model without one counts as 0),
  // the file's classifier is dropped and the model keeps its own freshly initialised one.
  const torch::Tensor* file_w = find(cls_w);
  const bool file_b = find(cls_b) != nullptr;
  // A file with half a classifier, or a weight that is no Linear's, is left to the strict check.
  if ((file_w != nullptr) == file_b && (!file_w || file_w->dim() == 2)) {
    const int64_t file_classes = file_w ? file_w->size(0) : 0;
    const int64_t model_classes = mine.count(cls_w) ? mine.at(cls_w).size(0) : 0;
    if (file_classes != model_classes) {
      NamedTensors kept;
      for (auto& kv : tensors)
        if (kv.first != cls_w && kv.first != cls_b) kept.push_back(std::move(kv));
      // The model's own classifier stands in for the file's: the strict load copies it onto itself.
      for (const auto& k : {cls_w, cls_b})
        if (mine.count(k)) kept.emplace_back(k, mine.at(k));
      tensors = std::move(kept);
      if (model_classes == 0)
        adapted.push_back("classifier " + cls + " dropped (" + std::to_string(file_classes) +
                          " classes in the file, num_classes = 0: pooled features)");
      else if (file_classes == 0)
        adapted.push_back("classifier " + cls + " initialised (the file has none)");
      else
        adapted.push_back("classifier " + cls + " re-initialised (" + std::to_string(file_classes) + " -> " +
                          std::to_string(model_classes) + " classes)");
    }
  }

  // 3. BatchNorm's step counter: PyTorch's BatchNorm fills in a missing num_batches_tracked when
  // loading a plain state dict, so timm loads files without it strictly; so does the engine.
  std::set<std::string> in_file;
  for (const auto& kv : tensors) in_file.insert(kv.first);
  for (const auto& [k, t] : targets)
    if (has_suffix(k, ".num_batches_tracked") && !in_file.count(k)) tensors.emplace_back(k, t);

  // 4. Everything else strictly, every problem listed at once.
  WeightHint hint = [&](const std::string& key, const torch::Tensor*, const torch::Tensor*) {
    return key == conv_key ? conv_refused : std::string();
  };
  load_weights(model, tensors, path, hint);

  std::string note;
  if (!adapted.empty()) note = "pretrained " + model.name() + " from " + path + ": " + join(adapted, "; ");
  model.set_pretrained_note(note);
  return note;
}

}  // namespace engine
