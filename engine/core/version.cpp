#include "engine/core/version.h"

// The values come from cmake/EngineVersion.cmake (definitions on this file only, and the revision
// header it writes at every build); the fallbacks keep a build by other means compiling.
#if __has_include("engine_revision.h")
#include "engine_revision.h"
#endif
#ifndef ENGINE_VERSION
#define ENGINE_VERSION "0.0.0"
#endif
#ifndef ENGINE_GIT_REVISION
#define ENGINE_GIT_REVISION "unknown"
#endif
#ifndef ENGINE_BUILD_TYPE
#define ENGINE_BUILD_TYPE "unknown"
#endif

namespace engine {

std::string engine_version() { return ENGINE_VERSION; }
std::string git_revision() { return ENGINE_GIT_REVISION; }
std::string build_type() { return ENGINE_BUILD_TYPE; }

}  // namespace engine
