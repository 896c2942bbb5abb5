#pragma once
// Runs a shell command for CLI tests and captures what a user would see.
#include <string>

namespace engine::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandResult run_command(const std::string& command);

}  // namespace engine::test
