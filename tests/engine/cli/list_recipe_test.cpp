// `engine list recipe` documents every section and key of a recipe from the code that reads them:
// every key a shipped recipe uses is listed there (or, inside a component's table, by
// `engine list KIND`), and each default it shows is the one the loader fills in.
#include <doctest/doctest.h>
#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "engine/trainer/recipe.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;
namespace fs = std::filesystem;

namespace {

struct Shown {
  std::string type, default_value, doc;
};

// The key lines of `engine list recipe`, by full dotted path: "data.split.valid_fraction",
// "callbacks[].name". Columns are separated by two or more spaces.
std::map<std::string, Shown> parse_list_recipe(const std::string& out) {
  std::map<std::string, Shown> keys;
  std::istringstream in(out);
  std::string line, section;
  const std::regex columns(R"( {2,})");
  while (std::getline(in, line)) {
    if (line.rfind("[[", 0) == 0) {
      section = line.substr(2, line.find("]]") - 2) + "[].";
      keys[section.substr(0, section.size() - 3)] = {"array of tables", "[]", ""};
    } else if (line.rfind("[", 0) == 0) {
      section = line.substr(1, line.find(']') - 1) + ".";
      keys[section.substr(0, section.size() - 1)] = {"table", "{}", ""};
    } else if (line.rfind("  ", 0) == 0) {
      std::vector<std::string> f(std::sregex_token_iterator(line.begin() + 2, line.end(), columns, -1), {});
      REQUIRE_MESSAGE(f.size() >= 3, "not key, type, = default[, doc]: " << line);
      REQUIRE_MESSAGE(f[2].rfind("= ", 0) == 0, "no \"= default\" column: " << line);
      keys[section + f[0]] = {f[1], f[2].substr(2), f.size() > 3 ? f[3] : ""};
    }
  }
  return keys;
}

// `engine list` (every kind): "models/convnext_atto" -> its option keys.
std::map<std::string, std::set<std::string>> parse_list_components(const std::string& out) {
  std::map<std::string, std::set<std::string>> options;
  std::istringstream in(out);
  std::string line, kind, name;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != ' ' && line.back() == ':') {
      kind = line.substr(0, line.size() - 1);
    } else if (line.rfind("      ", 0) == 0) {
      std::istringstream words(line);
      std::string key;
      words >> key;
      options[kind + "/" + name].insert(key);
    } else if (line.rfind("  ", 0) == 0) {
      name = line.substr(2, line.find(':') - 2);
      options[kind + "/" + name];
    }
  }
  return options;
}

std::string engine_out(const std::string& args) {
  auto r = run_command("cd " + source_path("") + " && " + engine_binary() + " " + args);
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return r.output;
}

// The kind of component a `name` key names, from its doc line: "registered model name (see
// `engine list models`)" -> "models"; "" for any other key.
std::string component_kind(const std::map<std::string, Shown>& schema, const std::string& name_key) {
  auto it = schema.find(name_key);
  if (it == schema.end()) return "";
  std::smatch m;
  const std::regex registered(R"(^registered \w+ name \(see `engine list (\w+)`\))");
  return std::regex_search(it->second.doc, m, registered) ? m[1].str() : "";
}

// The recipe as the loader sees it: a `base` recipe's tables with this file's keys merged in, so
// that `[model] pretrained = ...` finds the model's name in the base.
toml::table with_base(const fs::path& file) {
  toml::table own = toml::parse_file(file.string());
  const auto base = own["base"].value<std::string>();
  if (!base) return own;
  toml::table merged = toml::parse_file((file.parent_path() / *base).string());
  std::function<void(toml::table&, const toml::table&)> merge = [&](toml::table& into,
                                                                    const toml::table& from) {
    for (auto&& [k, v] : from) {
      toml::table* sub = into[k].as_table();
      if (sub && v.is_table())
        merge(*sub, *v.as_table());
      else
        v.visit([&, &key = k](const auto& node) { into.insert_or_assign(key, node); });
    }
  };
  merge(merged, own);
  return merged;
}

struct Walk {
  const std::map<std::string, Shown>& schema;
  const std::map<std::string, std::set<std::string>>& components;
  std::string file;
  std::vector<std::string> missing;
  int checked = 0;

  // A component's table ({ name = "digit_csv", path = ... }): its keys are the component's options.
  void component(const toml::table& t, const std::string& kind, const std::string& where) {
    const std::string name = t["name"].value_or(std::string());
    auto it = components.find(kind + "/" + name);
    if (it == components.end()) {
      missing.push_back(file + ": " + where + ": no " + kind + " \"" + name + "\" in `engine list`");
      return;
    }
    for (auto&& [k, v] : t) {
      const std::string key(k.str());
      ++checked;
      if (key != "name" && !it->second.count(key))
        missing.push_back(file + ": " + where + "." + key + " (" + kind + " \"" + name + "\")");
    }
  }

  void table(const toml::table& t, const std::string& prefix) {
    for (auto&& [k, v] : t) {
      std::string key = prefix + std::string(k.str());
      ++checked;
      if (!schema.count(key)) {
        // An open-ended table ([expect]) documents its entries with one placeholder.
        std::string placeholder = prefix + "\"<value>\"";
        if (!schema.count(placeholder)) {
          missing.push_back(file + ": " + key);
          continue;
        }
        key = placeholder;
      }
      if (const toml::table* sub = v.as_table()) {
        std::string kind = component_kind(schema, key + ".name");
        if (!kind.empty())
          component(*sub, kind, key);
        else
          table(*sub, key + ".");
      } else if (const toml::array* a = v.as_array(); a && a->is_array_of_tables()) {
        std::string kind = component_kind(schema, key + "[].name");
        for (const auto& e : *a) {
          if (!kind.empty())
            component(*e.as_table(), kind, key + "[]");
          else
            table(*e.as_table(), key + "[].");
        }
      }
    }
  }
};

}  // namespace

TEST_CASE("engine list recipe lists every key of every shipped recipe") {
  const auto schema = parse_list_recipe(engine_out("list recipe"));
  const auto components = parse_list_components(engine_out("list"));
  // The sections a new user meets first, by the names they write.
  for (const char* k :
       {"base", "run", "run.seed", "accelerator", "accelerator.mixed_precision", "data", "data.batch_size",
        "data.split.valid_fraction", "data.train_transforms[].name", "model.name", "optimizer.name",
        "scheduler.name", "train.epochs", "train.fine_tune.base_lr", "train.ema.decay", "predict.output",
        "expect", "callbacks[].name"})
    CHECK_MESSAGE(schema.count(k), std::string(k));
  int files = 0, checked = 0;
  for (const char* dir : {"recipes", "tests/recipes"}) {
    for (const auto& e : fs::directory_iterator(source_path(dir))) {
      if (e.path().extension() != ".toml") continue;
      Walk w{schema, components, e.path().string(), {}, 0};
      w.table(with_base(e.path()), "");
      for (const auto& m : w.missing) FAIL_CHECK("undocumented recipe key: " << m);
      checked += w.checked;
      ++files;
    }
  }
  MESSAGE(files << " recipes, " << checked << " keys");
  CHECK(files >= 9);
  CHECK(checked > 200);
}

TEST_CASE("engine list recipe shows every key the loader reads") {
  const auto shown = parse_list_recipe(engine_out("list recipe"));
  const auto read = engine::describe_recipe(engine::make_registries());
  CHECK(read.size() > 40);
  for (const auto& d : read) {
    auto it = shown.find(d.key);
    if (it == shown.end()) {
      FAIL_CHECK("read by the loader, not shown: " << d.key);
      continue;
    }
    CHECK_MESSAGE(it->second.type == d.type, d.key);
    CHECK_MESSAGE(it->second.default_value == d.default_value, d.key);
  }
}

TEST_CASE("the defaults engine list recipe shows are the values the loader fills in") {
  // The smallest valid recipe: every other key takes its default, which recipe.resolved.toml holds.
  const std::string dir = temp_dir("list_recipe_defaults");
  const std::string path = dir + "/minimal.toml";
  std::ofstream(path) << "[data]\ndataset = { name = \"digit_csv\", path = \"" << mnist_file("train.csv")
                      << "\" }\n"
                      << "[model]\nname = \"resnet18\"\n[optimizer]\nname = \"sgd\"\n"
                      << "[train.fine_tune]\n[train.ema]\n"
                      << "[predict]\ndataset = { name = \"digit_csv\", path = \"" << mnist_file("test.csv")
                      << "\", labeled = false }\n";
  const auto recipe = engine::load_recipe(path, {}, engine::make_registries());
  const toml::table resolved = toml::parse(recipe.resolved_toml);
  const auto shown = parse_list_recipe(engine_out("list recipe"));
  int compared = 0;
  std::set<std::string> seen;
  for (const auto& [key, s] : shown) {
    // Tables, array elements and placeholders are not values; components' names are given above.
    if (s.type == "table" || s.type == "array of tables" || key.find("[]") != std::string::npos ||
        key.find('"') != std::string::npos || !component_kind(shown, key).empty())
      continue;
    const auto got = resolved.at_path(key);
    if (!got) continue;  // a key only some recipes have
    const toml::table def = toml::parse("v = " + s.default_value);
    CHECK_MESSAGE(def["v"] == got, key << ": shown = " << s.default_value << ", loader = " << got);
    seen.insert(key);
    ++compared;
  }
  MESSAGE(compared << " defaults compared");
  CHECK(compared >= 30);
  for (const char* k :
       {"run.name", "run.seed", "accelerator.device", "data.batch_size", "data.split.valid_fraction",
        "train.epochs", "train.metrics", "train.fine_tune.base_lr", "train.ema.decay", "predict.output"})
    CHECK_MESSAGE(seen.count(k), std::string(k) << " was not compared");
}

TEST_CASE("engine list without a kind points to engine list recipe, and a typo'd kind gets a hint") {
  CHECK(engine_out("list").find("engine list recipe") != std::string::npos);
  auto r = run_command(engine_binary() + " list recip");
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(r.output.find("did you mean \"recipe\"?") != std::string::npos, r.output);
}
