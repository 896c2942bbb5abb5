#include "engine/core/text.h"

#include <algorithm>
#include <sstream>

namespace engine {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  // A typo changes a few characters; beyond ~40% of the word it is a different word.
  size_t limit = std::max<size_t>(2, (word.size() * 2 + 4) / 5);
  return best_d <= limit ? best : std::string();
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view listing) {
  const std::string near = nearest(word, candidates);
  return (near.empty() ? "" : "did you mean \"" + near + "\"? ") + std::string(listing) + join(candidates);
}

std::string format_number(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

std::string exact_number(double value) {
  std::ostringstream s;
  s.precision(17);
  s << value;
  return s.str();
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace engine
