#pragma once
// Everything a report shows about one run, read from what `engine run` left in its directory
// (DESIGN.md, "Run directory"). Every file is optional: a run still going, killed, or diverged
// renders from what is there, and `notes` says what is missing or odd instead of failing.
//
//   metrics.jsonl          {"type":"epoch"|"step","epoch":..,"step":..,"train/loss":..,...} per line;
//                          NaN/inf may be written as null (nlohmann) or as bare NaN/Infinity
//                          (Python's json); a truncated last line (killed mid-write) is skipped;
//                          a repeated epoch or a step going back (a resumed run) replaces the
//                          lines it repeats.
//   summary.json           final values; its presence marks a finished run
//   confusion_matrix.json  counts + class names (else confusion_matrix.csv, else counted from
//   valid_predictions.csv  per-sample label/prediction/probability/loss rows)
//   classes.json           class names
//   recipe.resolved.toml   the recipe with every default filled in
//   run_info.json          world size, device, machine, engine version (written when a run ends)
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace engine::report {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// One line of metrics.jsonl. Missing values are absent from `values`; non-finite ones are NaN/inf.
struct MetricRecord {
  double epoch = 0;  // 1-based; a step line's epoch is the epoch it ran in
  double step = -1;  // optimizer steps so far; -1 when the line has none
  std::map<std::string, double> values;
};

/// One row of valid_predictions.csv.
struct PredictionRow {
  int64_t index = -1;       // dataset index: rebuilding the dataset from the recipe finds the sample
  std::string name;         // the sample's name (file path) when the dataset has names
  std::string label;        // true class name ("" when unlabeled)
  std::string prediction;   // predicted class name
  double probability = 0;   // probability of the prediction
  double true_probability;  // probability of the true class (NaN when unknown)
  double loss = 0;          // per-sample cross-entropy
};

struct ConfusionData {
  std::vector<std::string> names;           // class names, indexed by class
  std::vector<std::vector<double>> counts;  // [true][predicted]
  std::string source;                       // file it came from
  bool empty() const { return counts.empty(); }
};

struct RunData {
  std::string dir;
  std::string name;         // [run] name, else the directory's name
  std::string recipe_toml;  // "" when recipe.resolved.toml is missing
  std::vector<MetricRecord> epochs, steps;
  std::map<std::string, double> summary;
  bool finished = false;  // summary.json exists
  std::vector<std::string> classes;
  ConfusionData confusion;
  std::vector<PredictionRow> predictions;
  std::map<std::string, std::string> info;  // run_info.json, flattened to text
  std::vector<std::string> notes;           // what is missing or odd, shown with the run

  /// Sum of the epochs' "seconds": training + evaluation wall time (NaN with no epoch).
  double wall_seconds() const;
  /// Every value key of the epoch and step lines, sorted ("train/loss", "valid/accuracy", "lr"...).
  std::vector<std::string> value_keys() const;
  /// True when some logged value is NaN or infinite.
  bool has_non_finite() const;
};

/// Values every epoch line carries that are not metrics (learning rate, timing, communication):
/// they get charts of their own and are left out of metric tables.
bool is_bookkeeping(const std::string& key);

/// Reads a run directory. A directory with neither recipe.resolved.toml nor metrics.jsonl is not a
/// run: UserError naming the path and what `engine run` writes there.
RunData read_run_dir(const std::string& dir);

/// One metrics.jsonl line, tolerant of bare NaN / Infinity / -Infinity. False when the line is not
/// a JSON object (a truncated line).
bool parse_metrics_line(const std::string& line, MetricRecord& record, bool& is_step);

}  // namespace engine::report
