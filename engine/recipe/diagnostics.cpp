#include "engine/recipe/diagnostics.h"

#include "engine/core/errors.h"

namespace engine {

std::string SourcePos::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

void Diagnostics::error(const SourcePos& where, const std::string& key_path,
                        const std::string& message, const std::string& hint) {
  std::string line = where.str() + ": ";
  if (!key_path.empty()) line += key_path + ": ";
  line += message;
  if (!hint.empty()) line += " (" + hint + ")";
  lines_.push_back(std::move(line));
}

void Diagnostics::throw_if_any() const {
  if (ok()) return;
  std::string all;
  for (const auto& l : lines_) all += "error: " + l + "\n";
  all += std::to_string(lines_.size()) + (lines_.size() == 1 ? " error" : " errors");
  throw UserError(all);
}

}  // namespace engine
