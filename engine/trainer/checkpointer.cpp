#include "engine/trainer/checkpointer.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "engine/core/errors.h"
#include "engine/io/weights.h"

namespace engine {

namespace {

constexpr const char* kCheckpointFormatKey = "engine.checkpoint";
constexpr const char* kCheckpointFormat = "resume-1";
const std::regex kStepFile(R"(step-(\d+)\.safetensors)");

// CRC-32 of the tensors' bytes in file order (what save_safetensors lays out after the header).
// The header itself is checked by the safetensors reader (offsets, sizes, dtypes).
std::pair<uint32_t, uint64_t> data_checksum(const NamedTensors& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors) {
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const auto* p = static_cast<const Bytef*>(c.data_ptr());
    uint64_t left = static_cast<uint64_t>(c.numel()) * c.element_size();
    bytes += left;
    while (left > 0) {  // crc32 takes a uInt length
      const uInt chunk = static_cast<uInt>(std::min<uint64_t>(left, 1u << 30));
      crc = crc32(crc, p, chunk);
      p += chunk;
      left -= chunk;
    }
  }
  return {static_cast<uint32_t>(crc), bytes};
}

int64_t step_of(const std::filesystem::path& p) {
  std::smatch m;
  const std::string name = p.filename().string();
  return std::regex_match(name, m, kStepFile) ? std::stoll(m[1]) : -1;
}

}  // namespace

Checkpointer::Checkpointer(std::string run_dir) : dir_(std::move(run_dir) + "/checkpoints") {}

std::string Checkpointer::best_path() const { return dir_ + "/best.safetensors"; }

void Checkpointer::save_weights(const std::string& path, const torch::nn::Module& model,
                                const std::map<std::string, std::string>& metadata) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  // The live weights: the write is synchronous and no step runs meanwhile (a copy of resnet34's
  // weights is 85 MB more at the peak).
  save_safetensors(path, model_tensors_live(model), metadata);
}

void Checkpointer::save_best(const torch::nn::Module& model, const TrainState& state,
                             const std::map<std::string, std::string>& extra) {
  auto meta = state.to_metadata();
  meta.insert(extra.begin(), extra.end());
  save_weights(best_path(), model, meta);
}

void Checkpointer::load_weights(const std::string& path, torch::nn::Module& model) {
  engine::load_weights(model, path);
}

std::string Checkpointer::resume_path(int64_t step) const { return fmt::format("{}/step-{:09d}.safetensors", dir_, step); }

std::string Checkpointer::save_resume(int64_t step, const NamedTensors& tensors, std::map<std::string, std::string> metadata,
                                      int64_t keep_last) {
  const auto [crc, bytes] = data_checksum(tensors);
  metadata[kCheckpointFormatKey] = kCheckpointFormat;
  metadata["engine.data_crc32"] = std::to_string(crc);
  metadata["engine.data_bytes"] = std::to_string(bytes);
  std::filesystem::create_directories(dir_);
  const std::string path = resume_path(step);
  save_safetensors(path, tensors, metadata);
  // Only once the new file is complete and renamed into place are older ones deleted.
  auto all = resume_checkpoints(std::filesystem::path(dir_).parent_path().string());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep_last, 1)); i < all.size(); ++i) {
    std::error_code ec;
    std::filesystem::remove(all[i], ec);  // a file we cannot delete costs disk, not correctness
  }
  return path;
}

std::vector<std::string> Checkpointer::resume_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(run_dir + "/checkpoints", ec)) {
    const int64_t s = step_of(e.path());
    if (s >= 0 && e.is_regular_file(ec)) found.emplace_back(s, e.path().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

SafetensorsFile Checkpointer::load_resume(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);  // size, header, offsets: UserError naming the file
  auto get = [&](const char* k) -> std::string {
    auto it = f.metadata.find(k);
    return it == f.metadata.end() ? "" : it->second;
  };
  if (get(kCheckpointFormatKey) != kCheckpointFormat)
    throw UserError(path + ": not a resume checkpoint of this engine (no \"" + std::string(kCheckpointFormatKey) + " = " + kCheckpointFormat +
                    "\" in its metadata); --resume takes a run directory or a checkpoints/step-<N>.safetensors file");
  const auto [crc, bytes] = data_checksum(f.tensors);
  if (std::to_string(bytes) != get("engine.data_bytes") || std::to_string(crc) != get("engine.data_crc32"))
    throw UserError(fmt::format("{}: damaged: its tensor data has {} bytes with CRC-32 {}, the checkpoint recorded {} bytes "
                                "with CRC-32 {} (a torn write or a corrupted disk)",
                                path, bytes, crc, get("engine.data_bytes"), get("engine.data_crc32")));
  return f;
}

}  // namespace engine
