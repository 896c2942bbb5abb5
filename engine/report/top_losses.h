#pragma once
// fastai's plot_top_losses: the validation samples the model got most wrong (highest loss), with
// their images. The images come from the run's own data: the dataset is rebuilt from
// recipe.resolved.toml (no model, no compute) and read at the indices valid_predictions.csv
// records. When the data is gone or changed, the rows are still listed and `note` says why the
// images are missing.
#include <cstddef>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

#include "engine/report/run_data.h"

namespace engine {
struct Registries;
}

namespace engine::report {

struct Thumbnail {
  PredictionRow row;
  std::string png;  // PNG bytes; "" when the image could not be read
};

struct WorstPredictions {
  std::vector<Thumbnail> items;  // highest loss first (NaN/inf losses before every finite one)
  std::string note;              // why images are missing or suspect; "" when all is well
};

/// The `count` labeled rows of run.predictions with the highest loss, with their images.
WorstPredictions worst_predictions(const RunData& run, const Registries& registries, size_t count);

/// PNG bytes of an image as a dataset returns it (8-bit or float, 1/3/4 channels in RGB order),
/// shrunk to at most `max_side` pixels on its longer side. Throws std::runtime_error when
/// OpenCV cannot encode it.
std::string encode_png(const cv::Mat& image, int max_side);

}  // namespace engine::report
