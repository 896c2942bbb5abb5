#include "components/metrics/confusion_matrix.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "components/metrics/metric.h"
#include "engine/io/atomic_file.h"

namespace engine {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double ratio(double num, double den) { return den > 0 ? num / den : kNaN; }

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// JSON has no NaN: an undefined ratio is written as null, which every JSON reader understands.
nlohmann::json number_or_null(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

}  // namespace

ConfusionMatrix::ConfusionMatrix(int64_t num_classes) : num_classes_(num_classes) {
  if (num_classes < 1)
    throw std::invalid_argument("ConfusionMatrix: num_classes must be >= 1, got " +
                                std::to_string(num_classes));
  counts_.assign(num_classes * num_classes, 0.0);
}

void ConfusionMatrix::reset() { counts_.assign(counts_.size(), 0.0); }

void ConfusionMatrix::update(const torch::Tensor& preds, const torch::Tensor& targets) {
  if (preds.dim() != 1 || targets.dim() != 1 || preds.size(0) != targets.size(0)) {
    std::ostringstream s;
    s << "ConfusionMatrix: expected preds [N] and targets [N], got " << preds.sizes() << " and "
      << targets.sizes();
    throw std::invalid_argument(s.str());
  }
  if (preds.size(0) == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor p = preds.to(torch::kLong);
  torch::Tensor t = targets.to(p.device(), torch::kLong);
  check_labels_in_range("confusion matrix targets", t, num_classes_);
  check_labels_in_range("confusion matrix predictions", p, num_classes_);
  // One bincount over the flat cell index t * C + p counts every cell at once.
  const int64_t cells = num_classes_ * num_classes_;
  torch::Tensor c = (t * num_classes_ + p).bincount({}, cells).to(torch::kCPU, torch::kDouble).contiguous();
  const double* v = c.data_ptr<double>();
  for (int64_t i = 0; i < cells; ++i) counts_[i] += v[i];
}

void ConfusionMatrix::set_sums(const std::vector<double>& sums) {
  if (sums.size() != counts_.size())
    throw std::invalid_argument("ConfusionMatrix: set_sums expects " + std::to_string(counts_.size()) +
                                " values (num_classes^2), got " + std::to_string(sums.size()));
  counts_ = sums;
}

void ConfusionMatrix::check_class(int64_t c, const char* what) const {
  if (c < 0 || c >= num_classes_)
    throw std::out_of_range(std::string("ConfusionMatrix: ") + what + " " + std::to_string(c) +
                            " outside [0, " + std::to_string(num_classes_) + ")");
}

double ConfusionMatrix::counts(int64_t t, int64_t p) const {
  check_class(t, "true class");
  check_class(p, "predicted class");
  return counts_[t * num_classes_ + p];
}

double ConfusionMatrix::support(int64_t c) const {
  check_class(c, "class");
  double s = 0;
  for (int64_t p = 0; p < num_classes_; ++p) s += counts_[c * num_classes_ + p];
  return s;
}

double ConfusionMatrix::predicted(int64_t c) const {
  check_class(c, "class");
  double s = 0;
  for (int64_t t = 0; t < num_classes_; ++t) s += counts_[t * num_classes_ + c];
  return s;
}

double ConfusionMatrix::total() const {
  double s = 0;
  for (double v : counts_) s += v;
  return s;
}

double ConfusionMatrix::precision(int64_t c) const { return ratio(counts(c, c), predicted(c)); }
double ConfusionMatrix::recall(int64_t c) const { return ratio(counts(c, c), support(c)); }
double ConfusionMatrix::f1(int64_t c) const { return ratio(2 * counts(c, c), support(c) + predicted(c)); }

double ConfusionMatrix::accuracy() const {
  double trace = 0;
  for (int64_t c = 0; c < num_classes_; ++c) trace += counts_[c * num_classes_ + c];
  return ratio(trace, total());
}

std::vector<std::string> ConfusionMatrix::names_or_indices(
    const std::vector<std::string>& class_names) const {
  if (class_names.empty()) {
    std::vector<std::string> out;
    for (int64_t c = 0; c < num_classes_; ++c) out.push_back(std::to_string(c));
    return out;
  }
  if (static_cast<int64_t>(class_names.size()) != num_classes_)
    throw std::invalid_argument("ConfusionMatrix: " + std::to_string(class_names.size()) +
                                " class names for " + std::to_string(num_classes_) + " classes");
  return class_names;
}

std::string ConfusionMatrix::to_csv(const std::vector<std::string>& class_names) const {
  std::vector<std::string> names = names_or_indices(class_names);
  std::string out = "true\\pred";
  for (const auto& n : names) out += "," + csv_cell(n);
  out += "\n";
  for (int64_t t = 0; t < num_classes_; ++t) {
    out += csv_cell(names[t]);
    // Counts are exact integers in a double (< 2^53): print them as integers, never "1e+06".
    for (int64_t p = 0; p < num_classes_; ++p)
      out += "," + std::to_string(static_cast<int64_t>(counts_[t * num_classes_ + p]));
    out += "\n";
  }
  return out;
}

std::string ConfusionMatrix::to_json(const std::vector<std::string>& class_names) const {
  std::vector<std::string> names = names_or_indices(class_names);
  nlohmann::json j;
  j["num_classes"] = num_classes_;
  j["total"] = static_cast<int64_t>(total());
  j["accuracy"] = number_or_null(accuracy());
  j["class_names"] = names;
  nlohmann::json rows = nlohmann::json::array();
  for (int64_t t = 0; t < num_classes_; ++t) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t p = 0; p < num_classes_; ++p)
      row.push_back(static_cast<int64_t>(counts_[t * num_classes_ + p]));
    rows.push_back(row);
  }
  j["counts"] = rows;
  nlohmann::json per = nlohmann::json::array();
  for (int64_t c = 0; c < num_classes_; ++c) {
    per.push_back({{"class", c},
                   {"name", names[c]},
                   {"support", static_cast<int64_t>(support(c))},
                   {"predicted", static_cast<int64_t>(predicted(c))},
                   {"correct", static_cast<int64_t>(counts(c, c))},
                   {"precision", number_or_null(precision(c))},
                   {"recall", number_or_null(recall(c))},
                   {"f1", number_or_null(f1(c))}});
  }
  j["per_class"] = per;
  return j.dump(1) + "\n";
}

std::string ConfusionMatrix::json_path(const std::string& path_csv) {
  const std::string ext = ".csv";
  if (path_csv.size() >= ext.size() && path_csv.compare(path_csv.size() - ext.size(), ext.size(), ext) == 0)
    return path_csv.substr(0, path_csv.size() - ext.size()) + ".json";
  return path_csv + ".json";
}

void ConfusionMatrix::write(const std::string& path_csv, const std::vector<std::string>& class_names) const {
  // Both texts are built before either file is touched, so a bad class_names list writes nothing.
  std::string csv = to_csv(class_names);
  std::string json = to_json(class_names);
  write_file_atomic(path_csv, csv);
  write_file_atomic(json_path(path_csv), json);
}

}  // namespace engine
