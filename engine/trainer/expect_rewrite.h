#pragma once
// The writer of `engine test --record`: replaces number values in a TOML file in place, by their
// source positions, and changes nothing else. A re-serialisation through a TOML library would drop
// the comments, the key order and the layout that make a recipe readable; this edit keeps every
// byte outside the replaced numbers.
#include <string>
#include <vector>

namespace engine {

/// One number to replace: the value token that starts at line:column (toml++'s 1-based position,
/// the column counted in Unicode code points), which must currently read as `old_value`.
struct TomlNumberEdit {
  int line = 0;
  int column = 0;
  double old_value = 0;
  std::string text;      // the new token, e.g. "0.123456"
  std::string key_path;  // "expect.valid/loss.equals": names the value in errors
};

/// `source` (the text of `file`) with each edit applied. Throws UserError naming file:line:col
/// when a position does not hold a number equal to old_value: the file changed since it was read,
/// and a blind edit could corrupt it.
std::string apply_number_edits(const std::string& source, const std::string& file,
                               const std::vector<TomlNumberEdit>& edits);

/// Reads `file`, applies the edits, and replaces the file atomically (a crash leaves the old
/// recipe or the new one, never a torn one).
void rewrite_numbers(const std::string& file, const std::vector<TomlNumberEdit>& edits);

}  // namespace engine
