#pragma once
// The default launch configuration `engine config` writes and `engine launch` reads when its
// flags are absent (Accelerate's write_basic_config / default_config.yaml).
#include <string>

namespace engine {

struct LaunchConfig {
  int num_processes = 1;            // processes per node; `engine config` sets the device count
  std::string mixed_precision;      // "" = leave the recipe's value; else no | bf16 | fp16
  int threads_per_process = 0;      // 0 = cores / processes
};

/// $ENGINE_CONFIG, else $XDG_CONFIG_HOME/engine/launch.toml, else ~/.config/engine/launch.toml.
std::string default_launch_config_path();

/// Reads `path` when it exists (a missing file gives the defaults). Bad content is a UserError.
LaunchConfig read_launch_config(const std::string& path);

/// Writes the defaults for this machine. Refuses (UserError) to overwrite without `force`.
LaunchConfig write_launch_config(const std::string& path, bool force);

}  // namespace engine
