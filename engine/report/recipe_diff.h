#pragma once
// "What changed between these two runs?": resolved recipes flattened to one line per key and
// compared key by key. Arrays of tables keep their position in the key
// (data.train_transforms[1].size), so a transform added, removed or reordered shows up.
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace engine::report {

/// Every leaf of a TOML document: "optimizer.lr" -> "0.002", "data.train_transforms[0].name" ->
/// "'resize'" (values as TOML writes them). A document that does not parse gives one entry
/// "(unreadable recipe)" with the parser's message.
std::map<std::string, std::string> flatten_toml(const std::string& toml_text);

struct RecipeDifference {
  std::string key;
  std::vector<std::optional<std::string>> values;  // one per run; nullopt when the run lacks the key
};

/// Keys whose values differ between at least two of the recipes (or that some recipes lack), in
/// key order. Identical recipes give no rows.
std::vector<RecipeDifference> recipe_differences(const std::vector<std::string>& toml_texts);

}  // namespace engine::report
