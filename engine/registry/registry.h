#pragma once
// Registry<T, Args...>: one typed registry per component kind (STYLE.md habit 1).
//
// An entry maps a name to a *parser*: it reads the component's options from the recipe (validating
// them, filling defaults, recording docs) and returns a Factory that builds the component later.
// Parsing and building are separate on purpose: `engine check` parses every component of a recipe
// and reports all errors without building anything heavy (a 50M-parameter model, a dataset).
//
// Registries are filled by explicit register_*() calls (see engine/registry/registries.h), never by
// static initialisers that the linker may drop.
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/text.h"
#include "engine/recipe/options.h"

namespace engine {

template <class T, class... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<T>(Args...)>;
  using Parser = std::function<Factory(Options&)>;
  struct Entry {
    std::string name;
    std::string doc;  // one line, shown by `engine list`
    Parser parse;
    // What the engine must know of the component before building it, e.g. "batch_norm" for a
    // model that normalises with batch statistics in training (the automatic layout, layout.h).
    std::vector<std::string> traits;
  };

  /// `kind` names the registry in messages: "transform", "model"...
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  /// A duplicate name is a programming error: fatal, naming both registrations.
  void add(const std::string& name, const std::string& doc, Parser parse, std::vector<std::string> traits = {}) {
    auto it = entries_.find(name);
    if (it != entries_.end())
      throw std::logic_error(kind_ + " \"" + name + "\" registered twice (\"" + it->second.doc + "\" and \"" +
                             doc + "\")");
    entries_[name] = Entry{name, doc, std::move(parse), std::move(traits)};
  }

  const Entry* find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  /// True when `name` is registered with `trait`.
  bool has_trait(const std::string& name, const std::string& trait) const {
    const Entry* e = find(name);
    return e && std::find(e->traits.begin(), e->traits.end(), trait) != e->traits.end();
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, e] : entries_) out.push_back(n);
    return out;
  }

  const std::string& kind() const { return kind_; }

  /// Reads `name` from the table and parses the rest with that component's parser. An unknown
  /// name is recorded (with the known names and the closest one) and yields an empty Factory.
  Factory parse(Options& opts) const {
    std::string name = opts.text("name", "", "registered " + kind_ + " name (see `engine list " + kind_ + "s`)");
    if (opts.describing()) return {};
    if (name.empty()) {
      opts.error("name", "missing " + kind_ + " name", "known: " + join(names()));
      opts.ignore_unread();
      return {};
    }
    const Entry* e = find(name);
    if (!e) {
      opts.error("name", "unknown " + kind_ + " \"" + name + "\"", did_you_mean(name, names()));
      opts.ignore_unread();
      return {};
    }
    return e->parse(opts);
  }

  /// The options of one entry with defaults and docs, for `engine list`.
  std::vector<OptionDoc> describe(const std::string& name) const {
    std::vector<OptionDoc> docs;
    if (const Entry* e = find(name)) {
      Options o = Options::describe(&docs);
      e->parse(o);
    }
    return docs;
  }

 private:
  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace engine
