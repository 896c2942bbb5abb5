#include "engine/cli/launch_config.h"

#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>

#include "engine/core/errors.h"
#include "engine/io/atomic_file.h"
#include "engine/recipe/options.h"

namespace engine {

std::string default_launch_config_path() {
  if (const char* p = std::getenv("ENGINE_CONFIG")) return p;
  if (const char* x = std::getenv("XDG_CONFIG_HOME")) return std::string(x) + "/engine/launch.toml";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.config/engine/launch.toml";
}

LaunchConfig read_launch_config(const std::string& path) {
  LaunchConfig c;
  if (!std::filesystem::exists(path)) return c;
  RecipeDocument doc(path, {});
  Options o = doc.root();
  c.num_processes = static_cast<int>(o.integer("num_processes", c.num_processes, "", 1, 1024));
  c.mixed_precision = o.text("mixed_precision", "", "");
  if (!c.mixed_precision.empty()) o.choice("mixed_precision", "no", {"no", "bf16", "fp16"}, "");
  c.threads_per_process = static_cast<int>(o.integer("threads_per_process", 0, "", 0, 1024));
  doc.finish();
  doc.diagnostics().throw_if_any();
  return c;
}

LaunchConfig write_launch_config(const std::string& path, bool force) {
  if (std::filesystem::exists(path) && !force)
    throw UserError(path + " already exists; pass --force to overwrite it");
  LaunchConfig c;
  const int gpus = static_cast<int>(torch::cuda::device_count());
  c.num_processes = gpus > 0 ? gpus : 1;
  std::string text =
      "# engine launch defaults, written by `engine config`; flags of `engine launch` override them.\n"
      "num_processes = " + std::to_string(c.num_processes) +
      (gpus > 0 ? "        # one process per CUDA device found\n" : "        # no CUDA device found: one CPU process\n") +
      "# mixed_precision = \"bf16\"  # uncomment to override every recipe's [accelerator] mixed_precision\n"
      "threads_per_process = 0  # 0 = this machine's cores divided among the processes\n";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  write_file_atomic(path, text);
  return c;
}

}  // namespace engine
