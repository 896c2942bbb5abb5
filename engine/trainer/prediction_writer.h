#pragma once
// Prediction files in the Kaggle layout ("ImageId,Label", ids from id_start) and their scoring
// against a held-out labels file of the same layout.
#include <torch/types.h>

#include <string>

namespace engine {

/// Writes atomically: header "<id_column>,<label_column>", one row per prediction, dataset order.
void write_predictions(const std::string& path, const torch::Tensor& predictions, const std::string& id_column,
                       const std::string& label_column, int64_t id_start);

/// Fraction of predictions equal to the labels file's labels (matched by id). A malformed file
/// or a missing id is a UserError naming file and line.
double score_predictions(const torch::Tensor& predictions, const std::string& labels_path, int64_t id_start);

}  // namespace engine
