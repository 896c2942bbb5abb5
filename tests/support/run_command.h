#pragma once
// Runs a shell command for CLI tests and captures what a user would see.
#include <string>

namespace engine::test {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandResult run_command(const std::string& command);

/// `engine ARGS`: the binary under test, run from the source tree as the README's commands are.
CommandResult run_engine(const std::string& args);

/// True when the command's output contains `text`.
inline bool has(const CommandResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }

}  // namespace engine::test
