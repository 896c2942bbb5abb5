#pragma once
// What this engine binary is: its version (CMakeLists.txt's project(VERSION)), the git revision
// it was configured from, and its build type. Only engine/core/version.cpp carries these as
// compile definitions, so a new revision recompiles one file. No torch here: the LibTorch side of
// `engine --version` (its version, CUDA, NCCL, Gloo) is engine/cli/cmd_version.cpp.
#include <string>

namespace engine {

/// "0.1.0"
std::string engine_version();
/// Short git revision of the source tree when CMake last configured the build (tools/setup.sh
/// configures on every run); "unknown" when it was not configured from a git checkout.
std::string git_revision();
/// CMAKE_BUILD_TYPE: "Release", "Debug"...
std::string build_type();

}  // namespace engine
