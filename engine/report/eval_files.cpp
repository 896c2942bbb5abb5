#include "engine/report/eval_files.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

namespace engine::report {

using nlohmann::json;

namespace {

// RFC 4180 rows read one at a time (quoted fields may hold commas, "" and line breaks): a
// valid_predictions.csv of 50,000 samples x 1,000 classes is never held in memory at once.
bool next_csv_row(std::istream& in, std::vector<std::string>& row) {
  row.clear();
  std::string line;
  if (!std::getline(in, line)) return false;
  std::string field;
  bool quoted = false;
  for (size_t i = 0;; ++i) {
    if (i == line.size()) {
      if (quoted && std::getline(in, line)) {  // a line break inside quotes
        field += '\n';
        i = static_cast<size_t>(-1);
        continue;
      }
      break;
    }
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        field += line[++i];
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  row.push_back(std::move(field));
  return true;
}

double to_double(const std::string& s) {
  if (s.empty()) return kNaN;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);  // also reads "nan", "inf"
  return end == s.c_str() ? kNaN : v;
}

}  // namespace

void read_predictions(RunData& run) {
  std::ifstream in(run.dir + "/valid_predictions.csv");
  std::vector<std::string> header, row;
  if (!in || !next_csv_row(in, header)) return;
  auto column = [&](const std::string& name) -> int {
    auto it = std::find(header.begin(), header.end(), name);
    return it == header.end() ? -1 : static_cast<int>(it - header.begin());
  };
  const int ci = column("index"), cn = column("name"), cl = column("label"), cp = column("prediction"),
            cpr = column("probability"), closs = column("loss");
  if (ci < 0 || cl < 0 || cp < 0 || closs < 0) {
    run.notes.push_back("valid_predictions.csv lacks index/label/prediction/loss columns: ignored");
    return;
  }
  std::map<std::string, size_t> prob_column;  // class name -> its p_<name> column
  for (size_t c = 0; c < header.size(); ++c)
    if (header[c].rfind("p_", 0) == 0) prob_column[header[c].substr(2)] = c;
  int64_t bad = 0;
  while (next_csv_row(in, row)) {
    if (row.size() == 1 && row[0].empty()) continue;
    if (row.size() != header.size()) {
      ++bad;  // a torn or hand-edited row
      continue;
    }
    PredictionRow p;
    p.index = static_cast<int64_t>(to_double(row[static_cast<size_t>(ci)]));
    if (cn >= 0) p.name = row[static_cast<size_t>(cn)];
    p.label = row[static_cast<size_t>(cl)];
    p.prediction = row[static_cast<size_t>(cp)];
    p.probability = cpr >= 0 ? to_double(row[static_cast<size_t>(cpr)]) : kNaN;
    p.loss = to_double(row[static_cast<size_t>(closs)]);
    auto pc = prob_column.find(p.label);
    p.true_probability = pc != prob_column.end() ? to_double(row[pc->second]) : kNaN;
    run.predictions.push_back(std::move(p));
  }
  if (bad > 0)
    run.notes.push_back("valid_predictions.csv: " + std::to_string(bad) + " malformed row(s) skipped");
}

void read_confusion(RunData& run) {
  if (std::ifstream in(run.dir + "/confusion_matrix.json"); in) {
    json j = json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("counts") && j["counts"].is_array()) {
      ConfusionData c;
      if (j.contains("class_names"))
        for (const auto& n : j["class_names"])
          c.names.push_back(n.is_string() ? n.get<std::string>() : n.dump());
      for (const auto& row : j["counts"]) {
        std::vector<double> r;
        for (const auto& v : row) r.push_back(v.is_number() ? v.get<double>() : 0.0);
        c.counts.push_back(std::move(r));
      }
      c.source = "confusion_matrix.json";
      run.confusion = std::move(c);
      return;
    }
  }
  if (std::ifstream in(run.dir + "/confusion_matrix.csv"); in) {
    std::vector<std::vector<std::string>> rows;
    for (std::vector<std::string> row; next_csv_row(in, row);) rows.push_back(row);
    if (rows.size() >= 2) {
      ConfusionData c;
      c.names.assign(rows[0].begin() + 1, rows[0].end());
      for (size_t r = 1; r < rows.size(); ++r) {
        std::vector<double> v;
        for (size_t k = 1; k < rows[r].size(); ++k) v.push_back(to_double(rows[r][k]));
        c.counts.push_back(std::move(v));
      }
      c.source = "confusion_matrix.csv";
      run.confusion = std::move(c);
      return;
    }
  }
  // No matrix file (older run, or one killed before its final evaluation): count it from the
  // per-sample rows when they exist.
  if (run.predictions.empty()) return;
  ConfusionData c;
  c.names = run.classes;
  auto index_of = [&](const std::string& name) -> int {
    auto it = std::find(c.names.begin(), c.names.end(), name);
    if (it != c.names.end()) return static_cast<int>(it - c.names.begin());
    c.names.push_back(name);
    return static_cast<int>(c.names.size() - 1);
  };
  std::vector<std::pair<int, int>> pairs;
  for (const auto& p : run.predictions)
    if (!p.label.empty()) pairs.emplace_back(index_of(p.label), index_of(p.prediction));
  if (pairs.empty()) return;
  c.counts.assign(c.names.size(), std::vector<double>(c.names.size(), 0.0));
  for (auto [t, p] : pairs) c.counts[static_cast<size_t>(t)][static_cast<size_t>(p)] += 1;
  c.source = "valid_predictions.csv";
  run.confusion = std::move(c);
}

}  // namespace engine::report
