#pragma once
// `engine run RECIPE --resume [RUN_DIR | CHECKPOINT]`: which checkpoint a run continues from, and
// whether this recipe and world may continue it. Loading the state into the run is the Trainer's
// (Trainer::restore); this file only finds, verifies and vets.
#include <optional>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace engine {

struct ResumeRequest {
  bool requested = false;
  /// A run directory (its newest verified checkpoint), one checkpoints/step-<N>.safetensors file,
  /// or "" for the recipe's own run directory, where no checkpoint means "start from scratch" (a
  /// job script can then pass --resume on every submission, the first one included).
  std::string from;
  /// The command-line words that ask for this resume ("--resume [FROM]"), for a child `engine run`.
  std::vector<std::string> args() const {
    if (!requested) return {};
    if (from.empty()) return {"--resume"};
    return {"--resume", from};
  }
};

struct ResumePoint {
  std::string path;       // the checkpoint file
  std::string run_dir;    // the run it continues: outputs go there
  SafetensorsFile file;   // verified contents
  std::vector<std::string> skipped;  // newer checkpoints found damaged, with the reason each
};

/// Finds and verifies the checkpoint to continue from. UserError when an explicitly named run
/// directory or file has no usable checkpoint (every damaged one is listed).
std::optional<ResumePoint> find_resume_point(const ResumeRequest& request, const std::string& recipe_run_dir);

/// Keys whose change a resume accepts: they do not change what the finished part computed.
const std::vector<std::string>& resume_safe_keys();

/// Refuses (UserError) a recipe that differs from the checkpoint's in any key but the safe ones,
/// listing each difference, and a world size other than the checkpoint's. Returns the safe keys
/// that did change, "key: old -> new", for the run to print.
std::vector<std::string> check_resumable(const ResumePoint& point, const std::string& resolved_toml, int world_size);

/// "  note: ...\n" when the checkpoint's run used another intra-op thread count than `threads` (the
/// resumed steps round as `threads` do), else "". Checkpoints from before the count was recorded: "".
std::string thread_count_note(const ResumePoint& point, int threads);

}  // namespace engine
