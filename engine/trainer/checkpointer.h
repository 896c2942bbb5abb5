#pragma once
// Checkpoints in the run directory, all written atomically (temp file, fsync, rename, fsync of the
// directory):
//   checkpoints/best.safetensors      the best weights so far, timm key names (loadable by timm)
//   checkpoints/step-<N>.safetensors  resume checkpoints after optimizer step N: everything
//                                     `engine run --resume` needs (see Trainer::save_checkpoint);
//                                     the newest `keep_last` are kept.
// A resume checkpoint carries the CRC-32 of its tensor data and its data size in its metadata; a
// file that does not match (torn, truncated, bit rot) is refused on load, and --resume then falls
// back to the previous one.
#include <torch/nn/module.h>

#include <map>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"
#include "engine/trainer/train_state.h"

namespace engine {

class Checkpointer {
 public:
  explicit Checkpointer(std::string run_dir);

  std::string dir() const { return dir_; }
  std::string best_path() const;

  void save_best(const torch::nn::Module& model, const TrainState& state, const std::map<std::string, std::string>& extra);
  /// Writes weights only, timm keys, to any path (model.safetensors).
  static void save_weights(const std::string& path, const torch::nn::Module& model,
                           const std::map<std::string, std::string>& metadata = {});
  /// Loads weights saved by save_best/save_weights into `model` (strict: every key, every shape).
  static void load_weights(const std::string& path, torch::nn::Module& model);

  /// checkpoints/step-<step>.safetensors, where save_resume writes the checkpoint of `step`.
  std::string resume_path(int64_t step) const;
  /// Writes checkpoints/step-<step>.safetensors with a checksum, then deletes all but the newest
  /// `keep_last` resume checkpoints. Returns the path written. A failed write (disk full) throws
  /// RunError and leaves every earlier checkpoint as it was.
  std::string save_resume(int64_t step, const NamedTensors& tensors, std::map<std::string, std::string> metadata,
                          int64_t keep_last);
  /// The resume checkpoints of `run_dir`, newest (highest step) first; temp files are not listed.
  static std::vector<std::string> resume_checkpoints(const std::string& run_dir);
  /// Reads one resume checkpoint and verifies its size and checksum: UserError naming the file
  /// and what is wrong when it is damaged or is not a resume checkpoint.
  static SafetensorsFile load_resume(const std::string& path);

 private:
  std::string dir_;
};

}  // namespace engine
