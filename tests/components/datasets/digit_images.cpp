#include "tests/components/datasets/digit_images.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>
#include <sstream>

#include "components/datasets/digit_csv.h"
#include "engine/core/errors.h"
#include "tests/support/paths.h"

namespace fs = std::filesystem;

namespace engine::test {

DigitImages write_digit_pngs(const std::string& tag, size_t n, bool by_class) {
  DigitCsvOptions o;
  o.path = mnist_file("train.csv");
  DigitCsv csv(o);
  REQUIRE(n <= csv.size());
  DigitImages out;
  out.dir = temp_dir(tag);
  for (size_t i = 0; i < n; ++i) {
    Sample s = csv.get(i);
    char row[8];
    std::snprintf(row, sizeof row, "%05zu", i);
    std::string label = std::to_string(s.label);
    std::string name = by_class ? label + "/" + row + ".png" : label + "_" + row + ".png";
    fs::create_directories(fs::path(out.dir + "/" + name).parent_path());
    REQUIRE(cv::imwrite(out.dir + "/" + name, s.image));
    out.names.push_back(name);
    out.rows.push_back(static_cast<int64_t>(i));
    out.labels.push_back(s.label);
    out.images.push_back(s.image);
  }
  return out;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string user_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace engine::test
