#pragma once
// digit_csv: images stored one per CSV row, the Kaggle digit-recognizer layout.
//   train.csv: label,pixel0,...,pixel783        test.csv: pixel0,...,pixel783
// - A header line is detected (its first field is not a number) and checked against `labeled`
//   when it names the columns the Kaggle way ("label" / "pixel0").
// - labeled = true: the first column is the class, 0..num_classes-1; false: every column is a pixel
//   and labels come back as -1.
// - Pixels are row-major, integers 0..255; images are CV_8UC1 of image_shape = [h, w], or, when
//   image_shape is not given, a square whose side is inferred from the pixel count (784 -> 28x28).
// - The whole file is loaded and checked when the dataset is built; a bad row is a UserError
//   "path:LINE: what (expected ...)" with the 1-based line number. CRLF line ends are accepted.
// - Stored as one contiguous uint8 buffer (8000 MNIST rows = 6.3 MB); get(i) returns a copy, so
//   no transform can change the stored data.
#include <string>
#include <vector>

#include "components/datasets/dataset.h"

namespace engine {

struct DigitCsvOptions {
  std::string path;                  // CSV file (must exist)
  bool labeled = true;               // first column is the label
  std::vector<int64_t> image_shape;  // [h, w]; empty = infer a square from the pixel count
  int64_t num_classes = 10;          // labels must be in 0..num_classes-1

  /// Reads and validates the options (existing file, image_shape of 0 or 2 positive values,
  /// num_classes >= 1); errors are recorded with their recipe positions.
  static DigitCsvOptions read(Options& o);
};

class DigitCsv : public Dataset {
 public:
  /// Loads and validates the whole file; throws UserError naming file and line on bad input.
  explicit DigitCsv(DigitCsvOptions opts);

  size_t size() const override { return labels_.size(); }
  Sample get(size_t index) const override;
  bool labeled() const override { return opts_.labeled; }
  int64_t num_classes() const override { return opts_.num_classes; }
  int64_t channels() const override { return 1; }
  std::string describe() const override;

  int height() const { return height_; }
  int width() const { return width_; }
  /// The label of sample i without copying its image (-1 when unlabeled).
  int64_t label(size_t index) const { return labels_.at(index); }
  const DigitCsvOptions& options() const { return opts_; }

 private:
  void parse(const std::string& text);

  DigitCsvOptions opts_;
  int height_ = 0, width_ = 0;
  std::vector<uint8_t> pixels_;  // size() * height_ * width_, row-major per image
  std::vector<int32_t> labels_;  // -1 when unlabeled
};

void register_digit_csv(DatasetRegistry& registry);

}  // namespace engine
