#pragma once
// Real MNIST digits (data/mnist/train.csv) written as image files in a temp dir, for the tests of
// the image-file datasets: the CSV rows are the ground truth for labels and pixels.
#include <functional>
#include <opencv2/core.hpp>
#include <string>
#include <vector>

namespace engine::test {

struct DigitImages {
  std::string dir;                 // the dataset root
  std::vector<std::string> names;  // relative paths, in the order the files were written
  std::vector<int64_t> rows;       // train.csv row of each file
  std::vector<int64_t> labels;     // its label
  std::vector<cv::Mat> images;     // its pixels, CV_8UC1 28x28
};

/// The first `n` rows of train.csv as PNGs under a fresh temp dir `tag`:
/// by_class = true:  <dir>/<label>/<row 5 digits>.png   (image_folder layout)
/// by_class = false: <dir>/<label>_<row 5 digits>.png   (file_names layout, like make_digit_pngs.sh)
DigitImages write_digit_pngs(const std::string& tag, size_t n, bool by_class);

/// Writes raw bytes to a file (creating its folder).
void write_bytes(const std::string& path, const std::string& bytes);
std::string read_bytes(const std::string& path);

/// The message of the UserError that `fn` throws; "" when it throws none.
std::string user_error(const std::function<void()>& fn);

}  // namespace engine::test
