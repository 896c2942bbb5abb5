#pragma once
// The ENGINE_* switches that turn a default-on optimisation off, to measure one path against the
// other (bench/RESULTS.md): the variable set to exactly "0" means off; unset or anything else, on.
// The few opt-in ones (measured neutral here) are on only when set to exactly "1".
#include <cstdlib>
#include <cstring>

namespace engine {

/// True when the environment variable `name` is "0". Reads the environment on each call.
inline bool switched_off(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "0") == 0;
}

/// True when the environment variable `name` is exactly "1": an opt-in switch.
inline bool env_is_one(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

}  // namespace engine
