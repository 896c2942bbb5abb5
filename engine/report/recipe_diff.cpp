#include "engine/report/recipe_diff.h"

#include <toml++/toml.h>

#include <charconv>
#include <set>
#include <sstream>

namespace engine::report {

namespace {

void flatten(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out);

// A value as TOML writes it, but floats in their shortest round-trip form: Debian's toml++ prints
// 0.8 as 0.80000000000000004, which is not what the recipe said.
std::string value_text(const toml::node& node) {
  if (const auto* d = node.as_floating_point()) {
    char buf[32];
    auto end = std::to_chars(buf, buf + sizeof buf, d->get()).ptr;
    std::string v(buf, end);
    if (v.find_first_of(".eEn") == std::string::npos) v += ".0";  // stays a float: 1 -> 1.0
    return v;
  }
  if (const auto* a = node.as_array()) {
    std::string v = "[";
    for (size_t i = 0; i < a->size(); ++i) v += (i ? ", " : " ") + value_text(*a->get(i));
    return v + (a->empty() ? "]" : " ]");
  }
  std::ostringstream s;
  node.visit([&](const auto& v) { s << v; });
  return s.str();
}

void flatten_node(const toml::node& node, const std::string& key, std::map<std::string, std::string>& out) {
  if (const auto* t = node.as_table()) {
    flatten(*t, key, out);
    return;
  }
  if (const auto* a = node.as_array(); a && !a->empty() && a->is_array_of_tables()) {
    for (size_t i = 0; i < a->size(); ++i)
      flatten(*a->get(i)->as_table(), key + "[" + std::to_string(i) + "]", out);
    return;
  }
  out[key] = value_text(node);
}

void flatten(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [k, v] : table) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    flatten_node(v, key, out);
  }
}

}  // namespace

std::map<std::string, std::string> flatten_toml(const std::string& toml_text) {
  std::map<std::string, std::string> out;
  try {
    toml::table t = toml::parse(toml_text);
    flatten(t, "", out);
  } catch (const toml::parse_error& e) {
    out["(unreadable recipe)"] = std::string(e.description());
  }
  return out;
}

std::vector<RecipeDifference> recipe_differences(const std::vector<std::string>& toml_texts) {
  std::vector<std::map<std::string, std::string>> flat;
  std::set<std::string> keys;
  for (const auto& t : toml_texts) {
    flat.push_back(flatten_toml(t));
    for (const auto& [k, v] : flat.back()) keys.insert(k);
  }
  std::vector<RecipeDifference> rows;
  for (const auto& key : keys) {
    RecipeDifference d{key, {}};
    for (const auto& f : flat) {
      auto it = f.find(key);
      d.values.push_back(it == f.end() ? std::nullopt : std::optional<std::string>(it->second));
    }
    bool differ = false;
    for (const auto& v : d.values) differ = differ || v != d.values.front();
    if (differ) rows.push_back(std::move(d));
  }
  return rows;
}

}  // namespace engine::report
