#pragma once
// Reading what a test's run left on disk.
#include <map>
#include <string>

namespace engine::test {

/// The whole file, byte for byte; "" when it cannot be read (the assertions on it then fail).
std::string read_text(const std::string& path);

/// KEY=VALUE lines (an `env > file` dump), by key.
std::map<std::string, std::string> read_env(const std::string& path);

}  // namespace engine::test
