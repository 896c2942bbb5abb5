#pragma once
// Reading what a test's run left on disk.
#include <map>
#include <string>

namespace engine::test {

/// The whole file, byte for byte; "" when it cannot be read (the assertions on it then fail).
std::string read_text(const std::string& path);

/// Writes `text` to `path`, replacing the file (a fixture a test builds by hand).
void write_text(const std::string& path, const std::string& text);

/// True when `needle` occurs in `text`.
inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

/// KEY=VALUE lines (an `env > file` dump), by key.
std::map<std::string, std::string> read_env(const std::string& path);

}  // namespace engine::test
