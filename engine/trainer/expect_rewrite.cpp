#include "engine/trainer/expect_rewrite.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "engine/core/errors.h"
#include "engine/io/atomic_file.h"

namespace engine {

namespace {

std::string at(const std::string& file, const TomlNumberEdit& e) {
  return file + ":" + std::to_string(e.line) + ":" + std::to_string(e.column);
}

// Byte offset of a toml++ position. toml++ skips a UTF-8 byte order mark before counting, and
// counts columns in code points: a multi-byte character earlier on the line (in a quoted key)
// is one column, so continuation bytes (10xxxxxx) are not counted.
std::optional<size_t> byte_offset(const std::string& s, int line, int column) {
  size_t i = s.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (int l = 1; l < line; ++l) {
    i = s.find('\n', i);
    if (i == std::string::npos) return std::nullopt;
    ++i;
  }
  for (int c = 1; c < column; ++c) {
    if (i >= s.size() || s[i] == '\n') return std::nullopt;
    ++i;
    while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
  }
  return i;
}

// Length of the TOML number token at `i`: sign, digits, '_', '.', exponent (with its sign),
// hex/octal/binary prefixes, inf and nan. It stops at what follows a value: ',', '}', space, '#'.
size_t token_length(const std::string& s, size_t i) {
  size_t j = i;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
  while (j < s.size()) {
    char c = s[j];
    bool exp_sign = (c == '+' || c == '-') && j > i && (s[j - 1] == 'e' || s[j - 1] == 'E');
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || exp_sign) ++j;
    else break;
  }
  return j - i;
}

std::optional<double> number_of(const std::string& token) {
  try {
    toml::table t = toml::parse("v = " + token);
    const toml::node* n = t.get("v");
    if (n && n->is_floating_point()) return n->as_floating_point()->get();
    if (n && n->is_integer()) return static_cast<double>(n->as_integer()->get());
  } catch (const toml::parse_error&) {
  }
  return std::nullopt;
}

}  // namespace

std::string apply_number_edits(const std::string& source, const std::string& file,
                               const std::vector<TomlNumberEdit>& edits) {
  struct Located {
    size_t offset, length;
    const TomlNumberEdit* edit;
  };
  std::vector<Located> located;
  for (const auto& e : edits) {
    auto off = byte_offset(source, e.line, e.column);
    const std::string where = at(file, e) + ": " + e.key_path;
    const std::string fix = "the file changed since it was read; run `engine test --record` again";
    if (!off) throw UserError(where + ": the file has no such position (" + fix + ")");
    size_t len = token_length(source, *off);
    auto old = number_of(source.substr(*off, len));
    if (!old || !(*old == e.old_value || (std::isnan(*old) && std::isnan(e.old_value))))
      throw UserError(where + ": expected the number being replaced here, found \"" +
                      source.substr(*off, std::max<size_t>(len, 1)) + "\" (" + fix + ")");
    if (!number_of(e.text)) throw UserError(where + ": \"" + e.text + "\" is not a TOML number");
    located.push_back({*off, len, &e});
  }
  // Replace from the end of the file backwards, so that earlier offsets stay valid.
  std::sort(located.begin(), located.end(), [](const Located& a, const Located& b) { return a.offset > b.offset; });
  std::string out = source;
  for (size_t k = 0; k < located.size(); ++k) {
    if (k > 0 && located[k].offset == located[k - 1].offset)
      throw UserError(at(file, *located[k].edit) + ": " + located[k].edit->key_path + ": two edits of one value");
    out.replace(located[k].offset, located[k].length, located[k].edit->text);
  }
  return out;
}

void rewrite_numbers(const std::string& file, const std::vector<TomlNumberEdit>& edits) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Write through a symlink to its target (a rename would replace the link with a copy), keep the
  // file's permissions, and do not replace a read-only recipe behind its owner's back.
  const fs::path target = fs::canonical(file, ec);
  if (ec) throw UserError(file + ": cannot record into it: " + ec.message());
  if (::access(target.c_str(), W_OK) != 0)
    throw UserError(file + ": cannot record into it: the file is not writable");
  std::ifstream in(target, std::ios::binary);
  if (!in) throw UserError(file + ": cannot record into it: cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  const fs::perms perms = fs::status(target).permissions();
  write_file_atomic(target.string(), apply_number_edits(text.str(), file, edits));
  fs::permissions(target, perms, ec);  // best effort: the values are written either way
}

}  // namespace engine
