#include "engine/recipe/options.h"

#include <toml++/toml.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

struct OptionsImpl {
  const toml::table* table = nullptr;  // null in describe mode
  toml::table* out = nullptr;          // resolved mirror; null in describe mode
  std::string path;                    // "data.dataset"
  std::string file;                    // recipe file, for positions of nodes without their own
  SourcePos table_pos;
  Diagnostics* diag = nullptr;
  std::vector<OptionDoc>* docs = nullptr;
  std::string doc_prefix;
  std::set<std::string, std::less<>> read;
  std::vector<std::shared_ptr<OptionsImpl>>* all = nullptr;
  Diagnostics own_diag;  // describe mode only
};

namespace {

// Debian's toml++ prints doubles with 17 digits (0.13100000000000001). Rewrite each long float
// value with the shortest text that reads back as the same double: exact, and what the user wrote.
// A scan of the printed TOML, not a regex over it: strings, comments and table headers are copied
// untouched (a regex rewrote run.name = "v1.00000000000000000001" to "v1.0"), and std::regex
// recursed once per digit: a string of 40,000 digits overflowed the stack (fuzz/corpus/recipe/).
// `value`: the text is one value (a default for `engine list`), not a document.
std::string shortest_floats(const std::string& text, bool value = false) {
  auto digits = [&](size_t& j) {
    size_t from = j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    return j - from;
  };
  // The end of a float with 10+ decimals starting at i ("-0.13100000000000001", "1e-05" printed
  // as "1.0000000000000001e-05"), or npos.
  auto long_float_end = [&](size_t i) {
    size_t j = i + (text[i] == '-' || text[i] == '+');
    if (!digits(j) || j >= text.size() || text[j] != '.') return std::string::npos;
    ++j;
    if (digits(j) < 10) return std::string::npos;
    if (j < text.size() && (text[j] == 'e' || text[j] == 'E')) {
      ++j;
      if (j < text.size() && (text[j] == '-' || text[j] == '+')) ++j;
      if (!digits(j)) return std::string::npos;
    }
    return j;
  };
  std::string out;
  out.reserve(text.size());
  char prev = value ? '=' : '\n';  // last character copied that is not a blank or a line end
  bool line_start = !value;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    size_t j = i + 1;
    if (c == '"' || c == '\'') {  // basic or literal string, single- or multi-line
      const std::string quote =
          text.compare(i, 3, std::string(3, c)) == 0 ? std::string(3, c) : std::string(1, c);
      for (j = i + quote.size(); j < text.size() && text.compare(j, quote.size(), quote) != 0;)
        j += c == '"' && text[j] == '\\' ? 2 : 1;
      j = std::min(text.size(), j + quote.size());
    } else if (c == '#' || (c == '[' && line_start && prev != '[' && prev != ',')) {  // comment, table header
      j = std::min(text.size(), text.find('\n', i));
    } else if ((prev == '=' || prev == '[' || prev == ',') &&
               (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+')) {
      size_t end = long_float_end(i);
      if (end != std::string::npos) {
        char buf[32];
        auto res =
            std::to_chars(buf, buf + sizeof(buf), std::strtod(text.substr(i, end - i).c_str(), nullptr));
        std::string shortest(buf, res.ptr);
        if (shortest.find_first_of(".eEn") == std::string::npos) shortest += ".0";
        out += shortest;
        i = end;
        prev = '0';
        line_start = false;
        continue;
      }
    }
    out.append(text, i, j - i);
    if (c == '\n') {
      line_start = true;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      line_start = false;
      prev = text[j - 1];
    }
    i = j;
  }
  return out;
}

SourcePos pos_of(const toml::node& n, const std::string& fallback_file) {
  const auto& src = n.source();
  if (src.begin.line == 0) return {"--set", 0, 0};
  return {src.path ? *src.path : fallback_file, static_cast<int>(src.begin.line),
          static_cast<int>(src.begin.column)};
}

std::string type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

template <class T>
std::string toml_text(const T& v) {
  std::ostringstream s;
  if constexpr (std::is_same_v<T, std::string>) {
    s << toml::value<std::string>(v);
  } else if constexpr (std::is_same_v<T, bool>) {
    s << (v ? "true" : "false");
  } else if constexpr (std::is_floating_point_v<T>) {
    s << toml::value<double>(v);
  } else if constexpr (std::is_integral_v<T>) {
    s << v;
  } else {  // vectors
    toml::array a;
    for (const auto& x : v) a.push_back(x);
    s << a;
  }
  return shortest_floats(s.str(), true);
}

template <class T>
auto to_toml(const T& v) {
  if constexpr (std::is_same_v<T, std::vector<double>> || std::is_same_v<T, std::vector<int64_t>> ||
                std::is_same_v<T, std::vector<std::string>>) {
    toml::array a;
    for (const auto& x : v) a.push_back(x);
    return a;
  } else {
    return v;
  }
}

// Reads one scalar-ish key with a converter; handles describe mode, docs, mirror and errors.
template <class T, class Convert>
T read_key(OptionsImpl& im, std::string_view key, const T& def, std::string_view type,
           std::string_view doc, Convert convert) {
  std::string k(key);
  im.read.insert(k);
  if (im.docs) im.docs->push_back({im.doc_prefix + k, std::string(type), toml_text(def), std::string(doc)});
  T value = def;
  if (im.table) {
    if (const toml::node* n = im.table->get(k)) {
      std::string why;
      if (auto v = convert(*n, why)) {
        value = *v;
      } else {
        std::string full = im.path.empty() ? k : im.path + "." + k;
        im.diag->error(pos_of(*n, im.file), full,
                       why.empty() ? "expected " + std::string(type) + ", got " + type_name(*n) : why);
      }
    }
  }
  if (im.out) im.out->insert_or_assign(k, to_toml(value));
  return value;
}

std::optional<double> as_number(const toml::node& n) {
  if (n.is_floating_point()) return n.as_floating_point()->get();
  if (n.is_integer()) return static_cast<double>(n.as_integer()->get());
  return std::nullopt;
}

template <class T, class Elem>
std::optional<std::vector<T>> as_vector(const toml::node& n, Elem elem, std::string& why) {
  const toml::array* a = n.as_array();
  if (!a) return std::nullopt;
  std::vector<T> out;
  for (size_t i = 0; i < a->size(); ++i) {
    auto v = elem(*a->get(i));
    if (!v) {
      why = "element " + std::to_string(i) + " is " + type_name(*a->get(i));
      return std::nullopt;
    }
    out.push_back(*v);
  }
  return out;
}


}  // namespace

Options Options::describe(std::vector<OptionDoc>* docs, std::string prefix) {
  auto im = std::make_shared<OptionsImpl>();
  im->docs = docs;
  im->doc_prefix = std::move(prefix);
  im->diag = &im->own_diag;
  im->file = "<describe>";
  return Options(im);
}

bool Options::describing() const { return impl_->table == nullptr; }
const std::string& Options::path() const { return impl_->path; }
Diagnostics& Options::diagnostics() const { return *impl_->diag; }

std::string Options::key_path(std::string_view key) const {
  return impl_->path.empty() ? std::string(key) : impl_->path + "." + std::string(key);
}

bool Options::has(std::string_view key) const {
  return impl_->table && impl_->table->get(std::string(key)) != nullptr;
}

std::vector<std::string> Options::keys() const {
  std::vector<std::string> out;
  if (impl_->table)
    for (auto&& [k, v] : *impl_->table) out.emplace_back(k.str());
  return out;
}

void Options::ignore_unread() {
  if (!impl_->table) return;
  for (auto&& [k, v] : *impl_->table) impl_->read.insert(std::string(k.str()));
}

SourcePos Options::where(std::string_view key) const {
  if (impl_->table && !key.empty())
    if (const toml::node* n = impl_->table->get(std::string(key))) return pos_of(*n, impl_->file);
  return impl_->table_pos;
}

void Options::error(std::string_view key, const std::string& message, const std::string& hint) {
  impl_->diag->error(where(key), key.empty() ? impl_->path : key_path(key), message, hint);
}

bool Options::flag(std::string_view key, bool def, std::string_view doc) {
  return read_key<bool>(*impl_, key, def, "bool", doc, [](const toml::node& n, std::string&) {
    return n.is_boolean() ? std::optional<bool>(n.as_boolean()->get()) : std::nullopt;
  });
}

int64_t Options::integer(std::string_view key, int64_t def, std::string_view doc, int64_t min, int64_t max) {
  return read_key<int64_t>(*impl_, key, def, "int", doc, [&](const toml::node& n, std::string& why) {
    if (!n.is_integer()) return std::optional<int64_t>();
    int64_t v = n.as_integer()->get();
    if (v < min || v > max) {
      why = "value " + std::to_string(v) + " is out of range";
      if (min != std::numeric_limits<int64_t>::min()) why += ", expected >= " + std::to_string(min);
      if (max != std::numeric_limits<int64_t>::max()) why += ", expected <= " + std::to_string(max);
      return std::optional<int64_t>();
    }
    return std::optional<int64_t>(v);
  });
}

double Options::number(std::string_view key, double def, std::string_view doc, double min, double max) {
  return read_key<double>(*impl_, key, def, "float", doc, [&](const toml::node& n, std::string& why) {
    auto v = as_number(n);
    if (v && (!(*v >= min) || !(*v <= max))) {
      why = "value " + format_number(*v) + " is out of range [" + format_number(min) + ", " + format_number(max) + "]";
      return std::optional<double>();
    }
    return v;
  });
}

std::string Options::text(std::string_view key, std::string_view def, std::string_view doc) {
  return read_key<std::string>(*impl_, key, std::string(def), "string", doc,
                               [](const toml::node& n, std::string&) {
                                 return n.is_string() ? std::optional<std::string>(n.as_string()->get())
                                                      : std::nullopt;
                               });
}

std::string Options::choice(std::string_view key, std::string_view def, const std::vector<std::string>& choices,
                            std::string_view doc) {
  std::string type = "one of " + join(choices, "|");
  return read_key<std::string>(*impl_, key, std::string(def), type, doc,
                               [&](const toml::node& n, std::string& why) -> std::optional<std::string> {
                                 if (!n.is_string()) return std::nullopt;
                                 std::string v = n.as_string()->get();
                                 if (v == def) return v;  // a resolved recipe writes back a default outside the set ("")
                                 for (const auto& c : choices)
                                   if (c == v) return v;
                                 why = "unknown value \"" + v + "\", expected " + type;
                                 std::string near = nearest(v, choices);
                                 if (!near.empty()) why += " (did you mean \"" + near + "\"?)";
                                 return std::nullopt;
                               });
}

std::vector<double> Options::numbers(std::string_view key, const std::vector<double>& def, std::string_view doc) {
  return read_key<std::vector<double>>(*impl_, key, def, "[float]", doc, [](const toml::node& n, std::string& why) {
    return as_vector<double>(n, as_number, why);
  });
}

std::vector<int64_t> Options::integers(std::string_view key, const std::vector<int64_t>& def, std::string_view doc) {
  return read_key<std::vector<int64_t>>(*impl_, key, def, "[int]", doc, [](const toml::node& n, std::string& why) {
    return as_vector<int64_t>(
        n,
        [](const toml::node& e) {
          return e.is_integer() ? std::optional<int64_t>(e.as_integer()->get()) : std::nullopt;
        },
        why);
  });
}

std::vector<std::string> Options::texts(std::string_view key, const std::vector<std::string>& def,
                                        std::string_view doc) {
  return read_key<std::vector<std::string>>(*impl_, key, def, "[string]", doc,
                                            [](const toml::node& n, std::string& why) {
                                              return as_vector<std::string>(
                                                  n,
                                                  [](const toml::node& e) {
                                                    return e.is_string()
                                                               ? std::optional<std::string>(e.as_string()->get())
                                                               : std::nullopt;
                                                  },
                                                  why);
                                            });
}

std::string Options::existing_file(std::string_view key, std::string_view def, std::string_view doc) {
  std::string v = text(key, def, doc);
  if (describing()) return v;
  if (v.empty()) {
    error(key, "a file path is required", "set " + key_path(key) + " = \"path/to/file\"");
  } else if (!std::filesystem::is_regular_file(v)) {
    std::string hint = "paths are relative to the working directory";
    if (v.rfind("data/", 0) == 0) hint += "; run ./setup.sh (or datasets/fetch_mnist.sh) to fetch the data";
    error(key, "file not found: " + v, hint);
  }
  return v;
}

Options Options::table(std::string_view key, std::string_view doc) {
  std::string k(key);
  impl_->read.insert(k);
  auto child = std::make_shared<OptionsImpl>();
  child->path = key_path(key);
  child->file = impl_->file;
  child->diag = impl_->diag;
  child->all = impl_->all;
  child->table_pos = where(key);
  if (impl_->docs) {
    impl_->docs->push_back({impl_->doc_prefix + k, "table", "{}", std::string(doc)});
    child->docs = impl_->docs;
    child->doc_prefix = impl_->doc_prefix + k + ".";
  }
  if (impl_->table) {
    static const toml::table empty;
    const toml::node* n = impl_->table->get(k);
    if (n && !n->is_table()) {
      impl_->diag->error(pos_of(*n, impl_->file), child->path, "expected a table, got " + type_name(*n));
      n = nullptr;
    }
    child->table = n ? n->as_table() : &empty;
    impl_->out->insert_or_assign(k, toml::table{});
    child->out = impl_->out->get_as<toml::table>(k);
  }
  if (child->all) child->all->push_back(child);
  return Options(child);
}

std::vector<Options> Options::tables(std::string_view key, std::string_view doc) {
  std::string k(key);
  impl_->read.insert(k);
  std::vector<Options> out;
  if (impl_->docs) impl_->docs->push_back({impl_->doc_prefix + k, "array of tables", "[]", std::string(doc)});
  if (!impl_->table) {
    // Describing, one element stands for them all, so that the keys each element takes (the
    // `name` of every [[callbacks]] entry) are documented by the code that reads them.
    if (!impl_->docs) return out;
    auto child = std::make_shared<OptionsImpl>();
    child->path = key_path(key) + "[]";
    child->file = impl_->file;
    child->diag = impl_->diag;
    child->docs = impl_->docs;
    child->doc_prefix = impl_->doc_prefix + k + "[].";
    out.push_back(Options(child));
    return out;
  }
  const toml::node* n = impl_->table->get(k);
  if (!n) return out;
  const toml::array* a = n->as_array();
  if (!a) {
    impl_->diag->error(pos_of(*n, impl_->file), key_path(key), "expected an array of tables, got " + type_name(*n),
                       "write [[" + key_path(key) + "]] sections");
    return out;
  }
  impl_->out->insert_or_assign(k, toml::array{});
  toml::array* mirror = impl_->out->get_as<toml::array>(k);
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::node* e = a->get(i);
    std::string p = key_path(key) + "[" + std::to_string(i) + "]";
    if (!e->is_table()) {
      impl_->diag->error(pos_of(*e, impl_->file), p, "expected a table, got " + type_name(*e));
      continue;
    }
    auto child = std::make_shared<OptionsImpl>();
    child->path = p;
    child->file = impl_->file;
    child->diag = impl_->diag;
    child->all = impl_->all;
    child->table = e->as_table();
    child->table_pos = pos_of(*e, impl_->file);
    mirror->push_back(toml::table{});
    child->out = mirror->back().as_table();
    if (child->all) child->all->push_back(child);
    out.push_back(Options(child));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// RecipeDocument

struct RecipeDocument::State {
  std::string file;
  toml::table table;
  toml::table resolved;
  Diagnostics diag;
  std::vector<std::shared_ptr<OptionsImpl>> all;
};

namespace {

toml::table parse_file_or_throw(const std::string& file) {
  if (!std::filesystem::is_regular_file(file)) throw UserError("recipe not found: " + file);
  try {
    return toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw UserError(file + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                    ": TOML syntax error: " + std::string(e.description()));
  }
}

// Child values replace the base's; tables merge key by key (one level of `base` is enough).
// Values are moved, not copied: a toml++ copy drops its source position, and the child's errors
// (and `engine test --record`) need its file:line:col.
void merge_into(toml::table& base, toml::table& child) {
  for (auto&& [k, v] : child) {
    toml::node* b = base.get(k.str());
    if (b && b->is_table() && v.is_table()) {
      merge_into(*b->as_table(), *v.as_table());
    } else {
      const std::string key(k.str());  // a lambda cannot capture a structured binding before C++20 (clang)
      v.visit([&](auto& node) { base.insert_or_assign(key, std::move(node)); });
    }
  }
}

void apply_override(toml::table& root, const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0)
    throw UserError("--set " + spec + ": expected key.path=value, e.g. --set optimizer.lr=1e-3");
  std::string path = spec.substr(0, eq), raw = spec.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + raw);
  } catch (const toml::parse_error&) {
    parsed = toml::table{{"v", raw}};  // a bare word is a string: --set run.name=quick
  }
  // Strip source positions so errors on this value point at "--set", not at a fake file.
  toml::table* t = &root;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.empty()) throw UserError("--set " + spec + ": empty key in path \"" + path + "\"");
    if (dot == std::string::npos) {
      parsed.get("v")->visit([&](const auto& node) {
        using N = std::decay_t<decltype(node)>;
        N copy;
        if constexpr (std::is_same_v<N, toml::table> || std::is_same_v<N, toml::array>) copy = node;
        else copy = N(node.get());
        t->insert_or_assign(part, std::move(copy));
      });
      return;
    }
    // "name[i]" walks into the i-th table of an array of tables: --set data.train_transforms[1].p=0
    size_t bracket = part.find('[');
    std::string name = part.substr(0, bracket);
    toml::node* n = t->get(name);
    if (!n) {
      if (bracket != std::string::npos) throw UserError("--set " + spec + ": the recipe has no \"" + name + "\" array");
      t->insert_or_assign(name, toml::table{});
      n = t->get(name);
    }
    if (bracket != std::string::npos) {
      size_t index = 0;
      auto close = part.find(']', bracket);
      auto res = std::from_chars(part.data() + bracket + 1, part.data() + (close == std::string::npos ? part.size() : close), index);
      toml::array* arr = n->as_array();
      if (res.ec != std::errc() || close != part.size() - 1)
        throw UserError("--set " + spec + ": bad index in \"" + part + "\", expected name[N]");
      if (!arr || index >= arr->size())
        throw UserError("--set " + spec + ": \"" + name + "\" has no element " + std::to_string(index) +
                        (arr ? " (it has " + std::to_string(arr->size()) + ")" : " (not an array)"));
      n = arr->get(index);
    }
    if (!n->is_table()) throw UserError("--set " + spec + ": \"" + part + "\" is not a table in the recipe");
    t = n->as_table();
    start = dot + 1;
  }
}

}  // namespace

RecipeDocument::RecipeDocument(const std::string& file, const std::vector<std::string>& overrides)
    : state_(std::make_unique<State>()) {
  state_->file = file;
  toml::table own = parse_file_or_throw(file);
  const toml::node* b = own.get("base");
  if (b && b->is_string() && b->as_string()->get().empty()) {  // `base = ''`, as recipe.resolved.toml says
    own.erase("base");
    b = nullptr;
  }
  if (b) {
    if (!b->is_string()) {
      auto p = pos_of(*b, file);
      throw UserError(p.str() + ": base: expected a string (path of the recipe to inherit)");
    }
    std::filesystem::path base_path = std::filesystem::path(file).parent_path() / b->as_string()->get();
    toml::table base = parse_file_or_throw(base_path.lexically_normal().string());
    if (base.get("base"))
      throw UserError(base_path.string() + ": a base recipe cannot itself have a base (one level only)");
    own.erase("base");
    merge_into(base, own);
    state_->table = std::move(base);
  } else {
    state_->table = std::move(own);
  }
  for (const auto& o : overrides) apply_override(state_->table, o);
}

RecipeDocument::RecipeDocument() : state_(std::make_unique<State>()) {}

std::unique_ptr<RecipeDocument> RecipeDocument::from_text(const std::string& source, const std::string& text) {
  std::unique_ptr<RecipeDocument> doc(new RecipeDocument());
  doc->state_->file = source;
  try {
    doc->state_->table = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw UserError(source + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
                    ": TOML syntax error: " + std::string(e.description()));
  }
  return doc;
}

std::string toml_subset(const std::string& toml_text, const std::vector<std::string>& keys,
                        const std::vector<std::string>& drop) {
  toml::table all = toml::parse(toml_text);
  // The table at a dotted path's parent (created in `t` when `create`), and the last key.
  auto parent = [](toml::table& t, const std::string& path, bool create) -> std::pair<toml::table*, std::string> {
    toml::table* at = &t;
    size_t start = 0;
    for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
      std::string part = path.substr(start, dot - start);
      if (create && !at->get(part)) at->insert(part, toml::table{});
      toml::node* n = at->get(part);
      if (!n || !n->is_table()) return {nullptr, ""};
      at = n->as_table();
    }
    return {at, path.substr(start)};
  };
  toml::table out;
  for (const auto& k : keys) {
    auto [from, key] = parent(all, k, false);
    const toml::node* n = from ? from->get(key) : nullptr;
    if (!n) continue;
    auto [to, last] = parent(out, k, true);
    n->visit([&, &to = to, &last = last](const auto& v) { to->insert_or_assign(last, v); });
  }
  for (const auto& d : drop) {
    auto [from, key] = parent(out, d, false);
    if (from) from->erase(key);
  }
  std::ostringstream s;
  s << out;
  return s.str() + "\n";
}

RecipeDocument::~RecipeDocument() = default;

Options RecipeDocument::root() {
  auto im = std::make_shared<OptionsImpl>();
  im->table = &state_->table;
  im->out = &state_->resolved;
  im->file = state_->file;
  im->table_pos = {state_->file, 1, 1};
  im->diag = &state_->diag;
  im->all = &state_->all;
  state_->all.push_back(im);
  return Options(im);
}

Diagnostics& RecipeDocument::diagnostics() { return state_->diag; }
const std::string& RecipeDocument::file() const { return state_->file; }

void RecipeDocument::finish() {
  for (const auto& im : state_->all) {
    if (!im->table) continue;
    std::vector<std::string> known(im->read.begin(), im->read.end());
    for (auto&& [k, v] : *im->table) {
      std::string key(k.str());
      if (im->read.count(key)) continue;
      std::string full = im->path.empty() ? key : im->path + "." + key;
      std::string near = nearest(key, known);
      std::string hint = near.empty() ? (known.empty() ? "this table takes no keys"
                                                        : "valid keys: " + join(known))
                                      : "did you mean \"" + near + "\"?";
      im->diag->error(pos_of(v, im->file), full, "unknown key", hint);
    }
  }
}

std::string RecipeDocument::resolved_toml() const {
  std::ostringstream s;
  s << "# Resolved from " << state_->file << ": every default filled in.\n" << state_->resolved << "\n";
  return shortest_floats(s.str());
}

}  // namespace engine
