#pragma once
// `engine` command line: run, launch, check, test, list, config, predict.

namespace engine {

/// Entry point of the `engine` binary; returns the process exit code (0 ok, 1 run failed, 2 bad input).
int cli_main(int argc, char** argv);

}  // namespace engine
