#pragma once
// Model weights <-> timm-keyed tensors (safetensors files), for any torch::nn::Module.
//
// Keys are the module's own dotted names, in PyTorch state_dict order (each module's parameters
// then its buffers, modules in pre-order), so a model whose module names follow timm's produces
// and accepts exactly timm's state_dict keys. Loading is strict: every problem is listed at once.
#include <torch/nn/module.h>

#include <functional>
#include <string>

#include "engine/io/safetensors.h"

namespace engine {

/// The module's own parameters and buffers by key, in state_dict order: the live tensors (no copy,
/// same dtype, device and memory format), undefined ones (a Conv2d without bias) skipped.
NamedTensors state_tensors(const torch::nn::Module& module);

/// Parameters and buffers by key, as contiguous CPU copies; floating tensors are converted to
/// fp32 (what the engine saves as model.safetensors), others keep their dtype (I64 counters).
NamedTensors model_tensors(const torch::nn::Module& module);

/// The same keys and dtypes without copies where a tensor already has its dtype (the live fp32
/// parameters, any device and memory format): for a synchronous save_safetensors, which converts
/// one tensor at a time, while nothing trains.
NamedTensors model_tensors_live(const torch::nn::Module& module);

/// "[64, 3, 7, 7]": a shape as the messages about weights write it.
std::string shape_text(torch::IntArrayRef shape);

/// Explains a problem with one key in the user's terms ("in_chans = 3 in the file ..."), or "".
/// `in_file` / `in_model` is null when the key is absent on that side.
using WeightHint = std::function<std::string(const std::string& key, const torch::Tensor* in_file,
                                             const torch::Tensor* in_model)>;

/// Copies `tensors` into the module's parameters and buffers (keeping their dtype, device and
/// memory format). Strict: missing keys, unexpected keys, shape mismatches and non-convertible
/// dtypes are all collected, then thrown as one UserError naming `source` and each key (plus the
/// hint for it, if any). Nothing is modified when any problem is found.
void load_weights(torch::nn::Module& module, const NamedTensors& tensors, const std::string& source,
                  const WeightHint& hint = {});

/// load_safetensors(path) then load_weights(module, tensors, path, hint).
void load_weights(torch::nn::Module& module, const std::string& safetensors_path,
                  const WeightHint& hint = {});

}  // namespace engine
