#pragma once
// Collects every problem found in a recipe so that one `engine check` reports all of them at once.
#include <string>
#include <vector>

namespace engine {

/// Where a value came from: "recipes/x.toml:12:9", or "--set" for command-line overrides.
struct SourcePos {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const;
};

class Diagnostics {
 public:
  /// One error line: "<file:line:col>: <key.path>: <message> (<hint>)".
  void error(const SourcePos& where, const std::string& key_path, const std::string& message,
             const std::string& hint = "");
  bool ok() const { return lines_.empty(); }
  const std::vector<std::string>& lines() const { return lines_; }
  /// Throws UserError whose message lists every error, one per line.
  void throw_if_any() const;

 private:
  std::vector<std::string> lines_;
};

}  // namespace engine
