#pragma once
// Contract of every dataset:
// - size() samples, addressed by index 0..size()-1 in a fixed order (the file's order).
// - get(i) is const and thread-safe: loader threads call it concurrently.
// - Images come back as cv::Mat HxW or HxWxC; the dataset documents its dtype and value range
//   (digit_csv: CV_8UC1, 0..255). Labels are 0..num_classes()-1, or -1 when unlabeled.
// - Bad input (missing file, bad row) is a UserError naming the file and the line, raised when
//   the dataset is built, never later inside a training step.
#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

struct Sample {
  cv::Mat image;
  int64_t label = -1;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual size_t size() const = 0;
  virtual Sample get(size_t index) const = 0;
  virtual bool labeled() const = 0;
  virtual int64_t num_classes() const = 0;
  /// Class names, indexed by label; written to the run directory and exported with the model.
  /// Default: "0", "1", ... (datasets whose labels are the class names, like digits).
  virtual std::vector<std::string> class_names() const;
  /// Channels of every image the dataset returns (1 gray, 3 colour in RGB order, as timm and
  /// fastai models expect), checked against the model's in_chans before training; 0 = not known.
  virtual int64_t channels() const { return 0; }
  /// A name for sample i in prediction files (an image's path relative to the dataset root), or
  /// "" when samples have no names (then rows are numbered, e.g. Kaggle's ImageId).
  virtual std::string sample_name(size_t index) const { return {}; }
  /// One line for the run log: "digit_csv data/mnist/train.csv: 8000 samples, 28x28, labeled".
  virtual std::string describe() const = 0;
};

using DatasetRegistry = Registry<Dataset>;

void register_datasets(DatasetRegistry& registry);

}  // namespace engine
