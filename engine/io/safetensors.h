#pragma once
// safetensors files (shared/reference/safetensors.md): what timm and Hugging Face read and write.
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace engine {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct SafetensorsFile {
  NamedTensors tensors;                          // in file order
  std::map<std::string, std::string> metadata;   // "__metadata__", string -> string
};

/// Writes atomically (temp file, fsync, rename): a crash never leaves a half-written file.
/// Tensors are written contiguous, little-endian, header padded to a multiple of 8.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Rejects truncated files, bad headers, overlapping/out-of-range offsets and shape/dtype size
/// mismatches with a UserError naming the file; never crashes.
SafetensorsFile load_safetensors(const std::string& path);

}  // namespace engine
