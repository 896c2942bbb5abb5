#pragma once
// Pretrained weights for any Model, the way timm's load_pretrained treats a checkpoint:
// - first conv (Model::first_conv()) with another input channel count: adapted like timm's
//   adapt_input_conv (to 1 channel: sum over RGB; to N channels: RGB repeated, cut to N, x 3/N);
// - classifier (Model::classifier()) with another class count, or a model with num_classes = 0,
//   or a file without a classifier: the file's classifier is dropped and the model keeps its fresh
//   classifier (timm re-creates it when num_classes differs);
// - BatchNorm num_batches_tracked absent from the file: kept at the model's value (PyTorch's
//   BatchNorm fills in 0 for a plain state dict, so timm loads such files strictly);
// - everything else strict (engine/io/weights.h): every missing, unexpected or mismatched key
//   listed in one UserError; a checkpoint of another architecture summarised in one line.
#include <string>

#include "components/models/model.h"

namespace engine {

/// Loads a timm-keyed .safetensors into `model` the way timm's load_pretrained does and returns one
/// line saying what was adapted ("" when nothing was).
std::string load_pretrained(Model& model, const std::string& path);

}  // namespace engine
