#include "engine/trainer/prediction_writer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "engine/core/errors.h"
#include "engine/io/atomic_file.h"

namespace engine {

namespace {
// A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string class_label(const std::vector<std::string>& names, int64_t c) {
  return c >= 0 && static_cast<size_t>(c) < names.size() ? names[static_cast<size_t>(c)] : std::to_string(c);
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);  // float32 round trip: predict can be checked to 1e-6
  return buf;
}
}  // namespace

void write_predictions(const std::string& path, const EvalResult& rows, const Dataset& data,
                       const std::vector<std::string>& class_names, const SubmissionFormat& format) {
  std::string out = csv_field(format.id_column) + "," + csv_field(format.label_column) + "\n";
  auto pred = rows.predictions.to(torch::kLong).contiguous();
  auto idx = rows.indices.to(torch::kLong).contiguous();
  const int64_t* v = pred.data_ptr<int64_t>();
  const int64_t* at = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < pred.numel(); ++i) {
    std::string name = data.sample_name(static_cast<size_t>(at[i]));
    out += (name.empty() ? std::to_string(format.id_start + at[i]) : csv_field(name)) + "," +
           csv_field(class_label(class_names, v[i])) + "\n";
  }
  write_file_atomic(path, out);
}

void write_eval_rows(const std::string& path, const EvalResult& rows, const Dataset& data,
                     const std::vector<std::string>& class_names) {
  std::string out = "index,name,label,prediction,probability,loss";
  for (const auto& c : class_names) out += "," + csv_field("p_" + c);
  out += "\n";
  auto probs = rows.probabilities.contiguous();
  const int64_t n = probs.size(0), C = probs.size(1);
  const float* p = probs.data_ptr<float>();
  auto idx = rows.indices.contiguous();
  auto lab = rows.labels.contiguous();
  auto pred = rows.predictions.contiguous();
  torch::Tensor loss = rows.losses.defined() ? rows.losses.contiguous() : torch::full({n}, NAN);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = idx.data_ptr<int64_t>()[i], y = lab.data_ptr<int64_t>()[i], yhat = pred.data_ptr<int64_t>()[i];
    out += std::to_string(k) + "," + csv_field(data.sample_name(static_cast<size_t>(k))) + "," +
           (y >= 0 ? csv_field(class_label(class_names, y)) : std::string()) + "," +
           csv_field(class_label(class_names, yhat)) + "," + number(p[i * C + yhat]) + "," +
           number(loss.data_ptr<float>()[i]);
    for (int64_t c = 0; c < C; ++c) out += "," + number(p[i * C + c]);
    out += "\n";
  }
  write_file_atomic(path, out);
}

double score_predictions(const torch::Tensor& predictions, const std::string& labels_path, int64_t id_start) {
  std::ifstream in(labels_path);
  if (!in) throw UserError(labels_path + ": cannot open labels file");
  std::unordered_map<int64_t, int64_t> labels;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (n == 1 && !line.empty() && !std::isdigit(static_cast<unsigned char>(line[0]))) continue;  // header
    if (line.empty()) continue;
    auto comma = line.find(',');
    int64_t id = 0, label = 0;
    const char* end = line.data() + line.size();
    if (comma == std::string::npos || std::from_chars(line.data(), line.data() + comma, id).ec != std::errc() ||
        std::from_chars(line.data() + comma + 1, end, label).ec != std::errc())
      throw UserError(labels_path + ":" + std::to_string(n) + ": expected \"id,label\", got \"" + line + "\"");
    labels[id] = label;
  }
  auto p = predictions.to(torch::kLong).contiguous();
  const int64_t* v = p.data_ptr<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < p.numel(); ++i) {
    auto it = labels.find(id_start + i);
    if (it == labels.end())
      throw UserError(labels_path + ": no label for id " + std::to_string(id_start + i));
    correct += it->second == v[i];
  }
  return p.numel() ? static_cast<double>(correct) / static_cast<double>(p.numel()) : 0.0;
}

}  // namespace engine
