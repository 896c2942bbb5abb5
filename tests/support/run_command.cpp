#include "tests/support/run_command.h"

#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "tests/support/paths.h"

namespace engine::test {

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

CommandResult run_engine(const std::string& args) {
  return run_command("cd " + source_path("") + " && " + engine_binary() + " " + args);
}

}  // namespace engine::test
