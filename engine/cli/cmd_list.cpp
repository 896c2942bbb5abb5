#include <fmt/format.h>

#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/core/text.h"
#include "engine/trainer/recipe.h"

namespace engine {

namespace {

template <class R>
void print_registry(const R& registry) {
  std::printf("%ss:\n", registry.kind().c_str());
  for (const auto& name : registry.names()) {
    std::printf("  %s: %s\n", name.c_str(), registry.find(name)->doc.c_str());
    for (const auto& d : registry.describe(name))
      std::printf("%s\n", fmt::format("      {:<22} {:<24} = {:<18} {}", d.key, d.type, d.default_value, d.doc).c_str());
  }
}

// One key line. Columns are separated by at least two spaces (no column holds two spaces in a
// row), so that a script, or a test, can split a line back into key, type, default and doc.
std::string key_line(const std::string& key, const OptionDoc& d) {
  return fmt::format("  {:<28}  {:<20}  = {:<12}  {}", key, d.type, d.default_value, d.doc);
}

// The recipe as a tree: top-level keys (base) first, then each top-level table as a [section]
// (an array of tables as a [[section]]) with its keys relative to it, in reading order; nested
// tables' keys keep their dotted path ("split.valid_fraction"). Grouped by section rather than
// printed in reading order, since a reader may come back to a section (the scheduler's name is
// read after [train]).
void print_recipe(const Registries& reg) {
  std::printf("recipe: every section and key, with type, default and meaning; any other key is an error.\n"
              "Override one with --set section.key=value. Component options (model, optimizer...): engine list KIND.\n");
  const auto docs = describe_recipe(reg);
  auto is_top = [](const OptionDoc& d) { return d.key.find('.') == std::string::npos; };
  auto is_section = [](const OptionDoc& d) { return d.type == "table" || d.type == "array of tables"; };
  for (const auto& d : docs)
    if (is_top(d) && !is_section(d)) std::printf("%s\n", key_line(d.key, d).c_str());
  for (const auto& d : docs) {
    if (!is_top(d) || !is_section(d)) continue;
    const bool array = d.type == "array of tables";
    std::printf(array ? "\n[[%s]]  %s\n" : "\n[%s]  %s\n", d.key.c_str(), d.doc.c_str());
    const std::string prefix = d.key + (array ? "[]." : ".");
    for (const auto& k : docs)
      if (k.key.rfind(prefix, 0) == 0) std::printf("%s\n", key_line(k.key.substr(prefix.size()), k).c_str());
  }
}

}  // namespace

int cmd_list(const Registries& reg, const std::string& kind) {
  std::vector<std::string> kinds{"datasets", "transforms", "models", "optimizers", "schedulers", "metrics", "callbacks", "recipe"};
  if (kind == "recipe" || kind == "recipes") {
    print_recipe(reg);
    return 0;
  }
  std::string k = kind;
  if (!k.empty() && k.back() != 's') k += 's';
  bool any = false;
  auto show = [&](const std::string& name, auto& r) {
    if (k.empty() || k == name) print_registry(r), any = true;
  };
  show("datasets", reg.datasets);
  show("transforms", reg.transforms);
  show("models", reg.models);
  show("optimizers", reg.optimizers);
  show("schedulers", reg.schedulers);
  show("metrics", reg.metrics);
  show("callbacks", reg.callbacks);
  if (!any) {
    std::string near = nearest(kind, kinds);
    throw UserError("unknown kind \"" + kind + "\"" + (near.empty() ? "" : " (did you mean \"" + near + "\"?)") +
                    "; kinds: " + join(kinds));
  }
  if (k.empty())
    std::printf("\nrecipe sections ([run], [data], [train], [[callbacks]], ...) and their keys: engine list recipe\n");
  return 0;
}

}  // namespace engine
