#pragma once
// ConfusionMatrix: counts[true class][predicted class] over an evaluation, for reports (which
// classes get confused) and per-class precision / recall. Not a registered metric: the evaluator
// owns one and feeds it the arg-max predictions it already computes.
//
// Like a Metric it is built from sums that ranks all-reduce: sums() is the C * C counts, row-major
// (row = true class), the same size on every rank; set_sums() loads the reduced values.
//
// write(path_csv, class_names) writes two files atomically (engine/io/atomic_file.h):
//   path_csv                    "true\pred,<name 0>,...,<name C-1>", then one row per true class:
//                               "<name i>,<count i,0>,...,<count i,C-1>" (integer counts)
//   json_path(path_csv)         the same path with ".csv" replaced by ".json" (appended when the
//                               path does not end in ".csv"); see to_json() for its fields.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace engine {

class ConfusionMatrix {
 public:
  /// num_classes >= 1 (else std::invalid_argument).
  explicit ConfusionMatrix(int64_t num_classes);

  /// Adds one batch: preds [N] and targets [N], integer tensors on any device, values in
  /// [0, num_classes) (else UserError naming the label). Shape mismatch: std::invalid_argument.
  void update(const torch::Tensor& preds, const torch::Tensor& targets);
  void reset();

  /// C * C counts, row-major, row = true class: what ranks all-reduce (SUM).
  const std::vector<double>& sums() const { return counts_; }
  /// Loads reduced sums; std::invalid_argument unless sums.size() == C * C.
  void set_sums(const std::vector<double>& sums);

  int64_t num_classes() const { return num_classes_; }
  /// Samples of true class `t` predicted as `p`.
  double counts(int64_t t, int64_t p) const;
  /// Samples whose true class is c (row sum).
  double support(int64_t c) const;
  /// Samples predicted as c (column sum).
  double predicted(int64_t c) const;
  /// All samples.
  double total() const;
  /// counts(c, c) / predicted(c); NaN when c is never predicted (undefined, not 0).
  double precision(int64_t c) const;
  /// counts(c, c) / support(c); NaN when c never occurs as a target.
  double recall(int64_t c) const;
  /// 2 counts(c, c) / (support(c) + predicted(c)); NaN when c occurs in neither.
  double f1(int64_t c) const;
  /// trace / total; NaN with no samples.
  double accuracy() const;

  /// The CSV text write() stores. `class_names` empty -> "0", "1", ...; otherwise exactly C
  /// names (else std::invalid_argument). Names with a comma, quote or newline are quoted (RFC 4180).
  std::string to_csv(const std::vector<std::string>& class_names = {}) const;
  /// The JSON text write() stores next to the CSV:
  ///   {"num_classes": C, "total": N, "accuracy": a,
  ///    "class_names": [...], "counts": [[row of true class 0], ...],
  ///    "per_class": [{"class": i, "name": "...", "support": s, "predicted": p, "correct": tp,
  ///                   "precision": x, "recall": y, "f1": z}, ...]}
  /// counts are integers; an undefined ratio (NaN above) is null; "accuracy" is null with no samples.
  std::string to_json(const std::vector<std::string>& class_names = {}) const;
  /// Writes to_csv() to path_csv and to_json() to json_path(path_csv), each atomically. The parent
  /// directory must exist. I/O failures throw RunError naming the path (write_file_atomic).
  void write(const std::string& path_csv, const std::vector<std::string>& class_names = {}) const;
  /// "dir/confusion.csv" -> "dir/confusion.json"; "dir/cm" -> "dir/cm.json".
  static std::string json_path(const std::string& path_csv);

 private:
  std::vector<std::string> names_or_indices(const std::vector<std::string>& class_names) const;
  void check_class(int64_t c, const char* what) const;

  int64_t num_classes_;
  std::vector<double> counts_;
};

}  // namespace engine
