#pragma once
// Typed, validated, self-documenting access to one table of a recipe.
//
// Every component reads its options through this class, and that single reading code serves three
// purposes: validation (wrong type, out of range, missing file -> an error with file:line:col,
// collected, never thrown one at a time), the resolved recipe (every value read, given or default,
// is mirrored into recipe.resolved.toml), and documentation (`engine list` runs the same reader in
// describe mode and prints each key's type, default and doc line). Keys that nobody read are
// reported by RecipeDocument::finish() with the nearest valid key: the schema is closed.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/recipe/diagnostics.h"

namespace engine {

/// One documented option, as `engine list` prints it.
struct OptionDoc {
  std::string key;            // "lr" or "split.valid_fraction"
  std::string type;           // "float", "int", "bool", "string", "one of a|b", "[float]", "table"...
  std::string default_value;  // TOML spelling of the default
  std::string doc;
};

class RecipeDocument;
struct OptionsImpl;

class Options {
 public:
  /// Describe mode: no recipe behind it; getters return defaults and record an OptionDoc each.
  static Options describe(std::vector<OptionDoc>* docs, std::string prefix = "");

  bool flag(std::string_view key, bool def, std::string_view doc);
  int64_t integer(std::string_view key, int64_t def, std::string_view doc,
                  int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());
  /// Accepts integers too (lr = 1 is 1.0).
  double number(std::string_view key, double def, std::string_view doc,
                double min = -std::numeric_limits<double>::infinity(),
                double max = std::numeric_limits<double>::infinity());
  std::string text(std::string_view key, std::string_view def, std::string_view doc);
  /// A string from a closed set; a typo gets "did you mean".
  std::string choice(std::string_view key, std::string_view def, const std::vector<std::string>& choices,
                     std::string_view doc);
  std::vector<double> numbers(std::string_view key, const std::vector<double>& def, std::string_view doc);
  std::vector<int64_t> integers(std::string_view key, const std::vector<int64_t>& def, std::string_view doc);
  std::vector<std::string> texts(std::string_view key, const std::vector<std::string>& def,
                                 std::string_view doc);
  /// A path that must name an existing file (an empty default makes the key required).
  std::string existing_file(std::string_view key, std::string_view def, std::string_view doc);

  /// A sub-table (`[data.split]` or `split = { ... }`); absent -> an empty table of defaults.
  Options table(std::string_view key, std::string_view doc);
  /// An array of tables (`[[callbacks]]`); absent -> empty.
  std::vector<Options> tables(std::string_view key, std::string_view doc);

  bool has(std::string_view key) const;
  /// Keys present in the recipe's table (for open-ended tables such as [expect]).
  std::vector<std::string> keys() const;
  /// Marks every key of this table as read: used when the table's reader could not run (e.g. an
  /// unknown component name), so that its keys are not reported a second time as "unknown key".
  void ignore_unread();
  bool describing() const;
  /// Records an error at the key's position (or the table's when the key is absent).
  void error(std::string_view key, const std::string& message, const std::string& hint = "");
  SourcePos where(std::string_view key = "") const;
  /// Dotted path of this table inside the recipe, e.g. "data.dataset" or "callbacks[1]".
  const std::string& path() const;
  /// "data.dataset.path"
  std::string key_path(std::string_view key) const;
  Diagnostics& diagnostics() const;

 private:
  friend class RecipeDocument;
  explicit Options(std::shared_ptr<OptionsImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<OptionsImpl> impl_;
};

/// A recipe file after `base` inheritance and `--set` overrides; owns every Options view on it.
/// The entries of a TOML text named by dotted paths ("model", "data.eval_transforms"),
/// re-serialised as TOML at the same paths, less the dotted paths in `drop`: the part of a
/// resolved recipe that an exported model keeps. Missing keys are left out.
std::string toml_subset(const std::string& toml_text, const std::vector<std::string>& keys,
                        const std::vector<std::string>& drop = {});

class RecipeDocument {
 public:
  /// Parses `file` (and its `base`), applies overrides "a.b=value" (value in TOML syntax, bare
  /// words taken as strings). Syntax errors throw UserError naming file:line:col.
  RecipeDocument(const std::string& file, const std::vector<std::string>& overrides);
  /// A document from TOML text (e.g. the model and transforms stored in an exported model);
  /// `source` names it in messages. No `base`, no overrides.
  static std::unique_ptr<RecipeDocument> from_text(const std::string& source, const std::string& text);
  ~RecipeDocument();
  RecipeDocument(const RecipeDocument&) = delete;
  RecipeDocument& operator=(const RecipeDocument&) = delete;

  Options root();
  Diagnostics& diagnostics();
  /// Reports every key that no reader consumed, with the nearest valid key.
  void finish();
  /// The recipe with every default filled in, as TOML text.
  std::string resolved_toml() const;
  const std::string& file() const;

 private:
  RecipeDocument();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace engine
