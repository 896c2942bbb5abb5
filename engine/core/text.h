#pragma once
// Small text helpers shared by every "did you mean" message.
#include <string>
#include <string_view>
#include <vector>

namespace engine {

/// Levenshtein distance between two strings (case-sensitive).
size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate closest to `word`, or "" when none is close enough to be a plausible typo.
std::string nearest(std::string_view word, const std::vector<std::string>& candidates);

/// The hint of an unknown name: "did you mean \"x\"? " (when a candidate is close) followed by
/// `listing` and the candidates: did_you_mean("acuracy", names) -> "did you mean \"accuracy\"? known: ...".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates,
                         std::string_view listing = "known: ");

/// A number as a user reads it in a message: 0.001, 1e-08, 255 (ostream's default format).
std::string format_number(double value);

/// A number with 17 significant digits: reading it back gives the same double ("nan", "inf" too).
/// What checkpoints store.
std::string exact_number(double value);

/// "a, b, c" — for "known: ..." lists.
std::string join(const std::vector<std::string>& items, std::string_view sep = ", ");

}  // namespace engine
