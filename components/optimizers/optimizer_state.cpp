// optimizer_state / load_optimizer_state: the optimizer's per-parameter buffers as named tensors
// "g{group}.p{param}.{field}", independent of LibTorch's internal state keys.
//
// Why not torch::save(optimizer): its state is keyed by a hex-pointer string on 1.13 and by void*
// on 2.x, 1.13 files may not load on 2.x, and hyper-parameters are dropped on load. Indexing by
// (group, param) position is stable across processes and versions, which exact resume needs.
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <cstdlib>
#include <sstream>
#include <type_traits>

#include "components/optimizers/optimizer.h"
#include "components/optimizers/optimizer_util.h"
#include "engine/core/errors.h"

namespace engine {

namespace {

// Copies unless asked for the live buffers: a copy does not change when training continues.
torch::Tensor snapshot(const torch::Tensor& t, StateCopy how) {
  return how == StateCopy::copies ? t.detach().clone() : t.detach();
}

template <class AdamState>
void save_adam(const AdamState& s, const std::string& prefix, StateCopy how, std::map<std::string, torch::Tensor>& out) {
  out[prefix + "step"] = torch::scalar_tensor(s.step(), torch::kLong);
  if (s.exp_avg().defined()) out[prefix + "exp_avg"] = snapshot(s.exp_avg(), how);
  if (s.exp_avg_sq().defined()) out[prefix + "exp_avg_sq"] = snapshot(s.exp_avg_sq(), how);
  if (s.max_exp_avg_sq().defined()) out[prefix + "max_exp_avg_sq"] = snapshot(s.max_exp_avg_sq(), how);
}

enum class Kind { sgd, adam, adamw };

Kind kind_of(torch::optim::Optimizer& opt) {
  if (dynamic_cast<torch::optim::SGD*>(&opt)) return Kind::sgd;
  if (dynamic_cast<torch::optim::AdamW*>(&opt)) return Kind::adamw;
  if (dynamic_cast<torch::optim::Adam*>(&opt)) return Kind::adam;
  throw std::invalid_argument("optimizer state: unsupported optimizer (supported: sgd, adam, adamw)");
}

// One saved tensor into a buffer shaped, typed and laid out like the parameter, as a fresh
// optimizer would allocate it (zeros_like(p) / clone(grad)); the values are copied bit for bit.
torch::Tensor restore_buffer(const torch::Tensor& saved, const torch::Tensor& p, const std::string& key) {
  if (saved.sizes() != p.sizes()) {
    std::ostringstream s;
    s << "optimizer state " << key << " has shape " << saved.sizes() << ", the parameter has " << p.sizes();
    throw UserError(s.str() + " (the checkpoint was written for a different model)");
  }
  return torch::empty_like(p, torch::MemoryFormat::Preserve).copy_(saved.detach());
}

struct Saved {
  std::map<std::string, torch::Tensor> fields;  // field name -> tensor
  const torch::Tensor& need(const std::string& prefix, const std::string& field) const {
    auto it = fields.find(field);
    if (it == fields.end())
      throw UserError("optimizer state " + prefix + field +
                      " is missing (was the checkpoint written with other "
                      "optimizer settings, e.g. amsgrad?)");
    return it->second;
  }
};

// "g{group}.p{param}.{field}" -> (group, param, field); false when the key has another shape.
bool parse_key(const std::string& key, size_t& group, size_t& param, std::string& field) {
  if (key.size() < 6 || key[0] != 'g') return false;
  char* end = nullptr;
  group = std::strtoul(key.c_str() + 1, &end, 10);
  if (end == key.c_str() + 1 || end[0] != '.' || end[1] != 'p') return false;
  const char* ps = end + 2;
  param = std::strtoul(ps, &end, 10);
  if (end == ps || end[0] != '.') return false;
  field = end + 1;
  return !field.empty();
}

template <class AdamState>
std::unique_ptr<torch::optim::OptimizerParamState> load_adam(const Saved& s, const torch::Tensor& p,
                                                             const std::string& prefix, bool amsgrad) {
  auto st = std::make_unique<AdamState>();
  const torch::Tensor& step = s.need(prefix, "step");
  if (step.numel() != 1) throw UserError("optimizer state " + prefix + "step must hold one value");
  st->step(step.item<int64_t>());
  st->exp_avg(restore_buffer(s.need(prefix, "exp_avg"), p, prefix + "exp_avg"));
  st->exp_avg_sq(restore_buffer(s.need(prefix, "exp_avg_sq"), p, prefix + "exp_avg_sq"));
  if (amsgrad)
    st->max_exp_avg_sq(restore_buffer(s.need(prefix, "max_exp_avg_sq"), p, prefix + "max_exp_avg_sq"));
  return st;
}

}  // namespace

std::map<std::string, torch::Tensor> optimizer_state(torch::optim::Optimizer& opt, StateCopy how) {
  std::map<std::string, torch::Tensor> out;
  Kind kind = kind_of(opt);
  auto& state = opt.state();
  const auto& groups = opt.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      auto it = state.find(optim_detail::state_key(state, params[i]));
      if (it == state.end()) continue;  // no step taken for this parameter yet: nothing to save
      std::string prefix = "g" + std::to_string(g) + ".p" + std::to_string(i) + ".";
      const auto* base = it->second.get();
      if (kind == Kind::sgd) {
        const auto& s = static_cast<const torch::optim::SGDParamState&>(*base);
        if (s.momentum_buffer().defined()) out[prefix + "momentum_buffer"] = snapshot(s.momentum_buffer(), how);
      } else if (kind == Kind::adam) {
        save_adam(static_cast<const torch::optim::AdamParamState&>(*base), prefix, how, out);
      } else {
        save_adam(static_cast<const torch::optim::AdamWParamState&>(*base), prefix, how, out);
      }
    }
  }
  return out;
}

void load_optimizer_state(torch::optim::Optimizer& opt, const std::map<std::string, torch::Tensor>& state) {
  Kind kind = kind_of(opt);
  auto& groups = opt.param_groups();
  // Validate and sort every key before touching the optimizer, so that a bad checkpoint leaves
  // it as it was.
  std::map<std::pair<size_t, size_t>, Saved> saved;
  for (const auto& [key, tensor] : state) {
    size_t g = 0, i = 0;
    std::string field;
    if (!parse_key(key, g, i, field))
      throw UserError("optimizer state: unexpected key \"" + key + "\" (expected g{group}.p{param}.{field})");
    if (g >= groups.size() || i >= groups[g].params().size())
      throw UserError("optimizer state " + key + ": no such parameter (the optimizer has " +
                      std::to_string(groups.size()) +
                      " groups; the checkpoint was written for a different model)");
    bool known = kind == Kind::sgd ? field == "momentum_buffer"
                                   : (field == "step" || field == "exp_avg" || field == "exp_avg_sq" ||
                                      field == "max_exp_avg_sq");
    if (!known)
      throw UserError("optimizer state " + key + ": field \"" + field +
                      "\" does not belong to this optimizer (the "
                      "checkpoint was written with another optimizer?)");
    saved[{g, i}].fields[field] = tensor;
  }
  std::vector<std::pair<torch::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>> restored;
  for (const auto& [gi, s] : saved) {
    const torch::Tensor& p = groups[gi.first].params()[gi.second];
    std::string prefix = "g" + std::to_string(gi.first) + ".p" + std::to_string(gi.second) + ".";
    if (kind == Kind::sgd) {
      auto st = std::make_unique<torch::optim::SGDParamState>();
      st->momentum_buffer(restore_buffer(s.need(prefix, "momentum_buffer"), p, prefix + "momentum_buffer"));
      restored.emplace_back(p, std::move(st));
    } else if (kind == Kind::adam) {
      bool ams = static_cast<torch::optim::AdamOptions&>(groups[gi.first].options()).amsgrad();
      restored.emplace_back(p, load_adam<torch::optim::AdamParamState>(s, p, prefix, ams));
    } else {
      bool ams = static_cast<torch::optim::AdamWOptions&>(groups[gi.first].options()).amsgrad();
      restored.emplace_back(p, load_adam<torch::optim::AdamWParamState>(s, p, prefix, ams));
    }
  }
  // Replace the whole state: a parameter without saved state must also have none after loading,
  // or its next step would differ from the run that wrote the checkpoint.
  auto& map = opt.state();
  map.clear();
  for (auto& [p, st] : restored) map[optim_detail::state_key(map, p)] = std::move(st);
}

}  // namespace engine
