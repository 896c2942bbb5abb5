#include "engine/trainer/prediction_writer.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "engine/core/errors.h"
#include "engine/io/atomic_file.h"

namespace engine {

void write_predictions(const std::string& path, const torch::Tensor& predictions, const std::string& id_column,
                       const std::string& label_column, int64_t id_start) {
  std::string out = id_column + "," + label_column + "\n";
  auto p = predictions.to(torch::kLong).contiguous();
  const int64_t* v = p.data_ptr<int64_t>();
  for (int64_t i = 0; i < p.numel(); ++i) out += std::to_string(id_start + i) + "," + std::to_string(v[i]) + "\n";
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
