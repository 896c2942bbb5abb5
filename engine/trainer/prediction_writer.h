#pragma once
// Files of per-sample results, shared by `engine run` and `engine predict`:
// - submission files in the Kaggle layout ("ImageId,Label"; ids numbered from id_start, or the
//   image file names when the dataset has names), labels written as class names;
// - valid_predictions.csv: every validation sample with its label, prediction, probability and
//   loss (the per-sample output that confusion matrices and "worst predictions" views read);
// - scoring a submission against a held-out labels file.
#include <torch/types.h>

#include <string>
#include <vector>

#include "components/datasets/dataset.h"
#include "engine/trainer/evaluator.h"

namespace engine {

struct SubmissionFormat {
  std::string id_column = "ImageId";
  std::string label_column = "Label";
  int64_t id_start = 1;
};

/// Writes atomically: header "<id_column>,<label_column>", one row per prediction in `rows` order.
void write_predictions(const std::string& path, const EvalResult& rows, const Dataset& data,
                       const std::vector<std::string>& class_names, const SubmissionFormat& format);

/// Writes atomically: index,name,label,prediction,probability,loss,p_<class>... one row per sample.
void write_eval_rows(const std::string& path, const EvalResult& rows, const Dataset& data,
                     const std::vector<std::string>& class_names);

/// Fraction of predictions equal to the labels file's labels (matched by id). A malformed file
/// or a missing id is a UserError naming file and line.
double score_predictions(const torch::Tensor& predictions, const std::string& labels_path, int64_t id_start);

}  // namespace engine
