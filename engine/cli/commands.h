#pragma once
// One function per subcommand; each returns the process exit code (0 ok, 1 failed, 2 bad input).
#include <string>
#include <vector>

#include "engine/trainer/registries.h"

namespace engine {

struct ResumeRequest;
/// `engine run`; with resume.requested it continues a checkpoint (SIGTERM/SIGINT write one and
/// exit with preemption::kPreemptedExitCode).
int cmd_run(const Registries& reg, const std::string& recipe, const std::vector<std::string>& overrides,
            const ResumeRequest& resume);
int cmd_check(const Registries& reg, const std::vector<std::string>& recipes, const std::vector<std::string>& overrides);
int cmd_list(const Registries& reg, const std::string& kind);
/// What `engine --version` prints: engine version, git revision, build type, LibTorch, CUDA, NCCL, Gloo.
std::string version_text();
struct LaunchOptions;
/// Starts the ranks of `engine run recipe` (this node's share) and supervises them.
int cmd_launch(const Registries& reg, const LaunchOptions& options, const std::string& mixed_precision, const std::string& recipe,
               const std::vector<std::string>& overrides, const ResumeRequest& resume);
int cmd_export(const std::string& run_dir, const std::string& out);
/// `engine report`: one HTML file from run directories (default: the first one's report.html).
int cmd_report(const Registries& reg, const std::vector<std::string>& run_dirs, const std::string& output, int64_t top);

struct PredictArgs {
  std::string model;                 // export file
  std::vector<std::string> images;
  std::string csv, output;           // --csv CSV -o OUT (Kaggle digit-recognizer layout)
  bool json = false;
  std::string device = "cpu";
  int64_t threads = 0;
  int64_t batch_size = 64;
  std::string id_column = "ImageId", label_column = "Label";
  int64_t id_start = 1;
};
int cmd_predict(const PredictArgs& args);
/// record: write each `equals` baseline back into its recipe with the measured value.
int cmd_test(const Registries& reg, const std::vector<std::string>& targets, const std::vector<std::string>& overrides,
             bool record = false);

}  // namespace engine
