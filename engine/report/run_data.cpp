#include "engine/report/run_data.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/errors.h"
#include "engine/report/eval_files.h"

namespace engine::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  out = s.str();
  return true;
}

// Bare NaN / Infinity / -Infinity (Python's json.dumps) are not JSON: quote them so that
// nlohmann parses the line, and number() turns the strings back into doubles.
std::string quote_non_finite(const std::string& line) {
  std::string out;
  out.reserve(line.size() + 8);
  bool in_string = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size())
        out += line[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool matched = false;
    for (const char* word : {"-Infinity", "Infinity", "NaN"}) {
      const size_t n = std::char_traits<char>::length(word);
      if (line.compare(i, n, word) == 0) {
        out += '"';
        out += word;
        out += '"';
        i += n - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  return out;
}

// A logged value: a number, null (how nlohmann writes NaN/inf) or one of the quoted words above.
bool number(const json& v, double& out) {
  if (v.is_number()) {
    out = v.get<double>();
    return true;
  }
  if (v.is_null()) {
    out = kNaN;
    return true;
  }
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s == "NaN" || s == "nan")
      out = kNaN;
    else if (s == "Infinity" || s == "inf")
      out = std::numeric_limits<double>::infinity();
    else if (s == "-Infinity" || s == "-inf")
      out = -std::numeric_limits<double>::infinity();
    else
      return false;
    return true;
  }
  return false;
}

// A resumed run logs again from where it resumed: a record repeating an epoch (or going back in
// steps) replaces the records it repeats, so curves show the history the final weights have.
void append_record(std::vector<MetricRecord>& records, MetricRecord r, bool by_step) {
  if (by_step && r.step >= 0) {
    while (!records.empty() && records.back().step >= r.step) records.pop_back();
  } else {
    while (!records.empty() && records.back().epoch >= r.epoch) records.pop_back();
  }
  records.push_back(std::move(r));
}

void read_metrics(RunData& run) {
  const std::string path = run.dir + "/metrics.jsonl";
  std::string text;
  if (!read_file(path, text)) {
    run.notes.push_back("no metrics.jsonl: the run ended (or is) before its first logged step");
    return;
  }
  std::istringstream in(text);
  std::string line;
  int64_t n = 0, bad = 0;
  const bool ends_with_newline = !text.empty() && text.back() == '\n';
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    MetricRecord r;
    bool is_step = false;
    if (!parse_metrics_line(line, r, is_step)) {
      if (in.peek() == EOF && !ends_with_newline)
        run.notes.push_back(
            "metrics.jsonl: the last line is incomplete (the run was killed while writing it): skipped");
      else
        ++bad;
      continue;
    }
    append_record(is_step ? run.steps : run.epochs, std::move(r), is_step);
  }
  if (bad > 0) run.notes.push_back("metrics.jsonl: " + std::to_string(bad) + " unreadable line(s) skipped");
}

void read_summary(RunData& run) {
  std::string text;
  if (!read_file(run.dir + "/summary.json", text)) return;
  json j = json::parse(quote_non_finite(text), nullptr, false);
  if (!j.is_object()) {
    run.notes.push_back("summary.json is not a JSON object: ignored");
    return;
  }
  run.finished = true;
  for (const auto& [k, v] : j.items()) {
    double d;
    if (number(v, d)) run.summary[k] = d;
  }
}

void read_classes(RunData& run) {
  std::string text;
  if (!read_file(run.dir + "/classes.json", text)) return;
  json j = json::parse(text, nullptr, false);
  if (!j.is_array()) return;
  for (const auto& v : j)
    if (v.is_string()) run.classes.push_back(v.get<std::string>());
}

void flatten_json(const json& j, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) flatten_json(v, prefix.empty() ? k : prefix + "." + k, out);
  } else {
    out[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

void read_info(RunData& run) {
  std::string text;
  if (!read_file(run.dir + "/run_info.json", text)) return;
  json j = json::parse(text, nullptr, false);
  if (j.is_object()) flatten_json(j, "", run.info);
}

std::string run_name(const RunData& run) {
  if (!run.recipe_toml.empty()) {
    try {
      toml::table t = toml::parse(run.recipe_toml);
      if (auto name = t["run"]["name"].value<std::string>()) return *name;
    } catch (const toml::parse_error&) {
      // a damaged recipe file: fall back to the directory's name
    }
  }
  fs::path p = fs::path(run.dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

bool parse_metrics_line(const std::string& line, MetricRecord& record, bool& is_step) {
  json j = json::parse(quote_non_finite(line), nullptr, false);
  if (!j.is_object()) return false;
  record = MetricRecord{};
  const std::string type = j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
  is_step = type == "step" || (type.empty() && j.contains("batch"));
  for (const auto& [k, v] : j.items()) {
    if (k == "type" || k == "batch") continue;
    double d;
    if (!number(v, d)) continue;
    if (k == "epoch")
      record.epoch = d;
    else if (k == "step")
      record.step = d;
    else
      record.values[k] = d;
  }
  return true;
}

double RunData::wall_seconds() const {
  if (epochs.empty()) return kNaN;
  double s = 0;
  for (const auto& e : epochs) {
    auto it = e.values.find("seconds");
    if (it != e.values.end() && std::isfinite(it->second)) s += it->second;
  }
  return s;
}

std::vector<std::string> RunData::value_keys() const {
  std::set<std::string> keys;
  for (const auto* records : {&epochs, &steps})
    for (const auto& r : *records)
      for (const auto& [k, v] : r.values) keys.insert(k);
  return {keys.begin(), keys.end()};
}

bool RunData::has_non_finite() const {
  for (const auto* records : {&epochs, &steps})
    for (const auto& r : *records)
      for (const auto& [k, v] : r.values)
        if (!std::isfinite(v)) return true;
  return false;
}

RunData read_run_dir(const std::string& dir) {
  RunData run;
  run.dir = dir;
  const bool has_recipe = fs::exists(dir + "/recipe.resolved.toml"),
             has_metrics = fs::exists(dir + "/metrics.jsonl");
  if (!fs::is_directory(dir) || (!has_recipe && !has_metrics))
    throw UserError(
        dir +
        ": not a run directory (expected recipe.resolved.toml or metrics.jsonl, which `engine run` "
        "writes there). Give the run's output_dir, e.g. runs/<run.name>");
  if (has_recipe)
    read_file(dir + "/recipe.resolved.toml", run.recipe_toml);
  else
    run.notes.push_back("no recipe.resolved.toml: the recipe and the sample thumbnails cannot be shown");
  run.name = run_name(run);
  read_metrics(run);
  read_summary(run);
  read_classes(run);
  read_predictions(run);
  read_confusion(run);
  read_info(run);
  if (!run.finished) {
    std::string what = "no summary.json: the run is still going, or was stopped before its final evaluation";
    if (!run.epochs.empty()) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " (last logged epoch: %g)", run.epochs.back().epoch);
      what += buf;
    }
    run.notes.push_back(what);
  }
  if (run.has_non_finite())
    run.notes.push_back("some logged values are NaN or infinite (marked x on the charts)");
  return run;
}

bool is_bookkeeping(const std::string& key) {
  return key == "lr" || key == "seconds" || key == "images_per_s" || key == "eval_images_per_s" ||
         key == "comm_ms_per_step";
}

}  // namespace engine::report
