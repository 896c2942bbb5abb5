#include "components/datasets/digit_csv.h"

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <set>

#include "components/datasets/all.h"
#include "engine/core/errors.h"
#include "engine/recipe/options.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {
std::string write_file(const std::string& tag, const std::string& name, const std::string& text) {
  std::string p = test::temp_dir(tag) + "/" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

DigitCsvOptions csv_opts(const std::string& path, bool labeled = true, std::vector<int64_t> shape = {}) {
  DigitCsvOptions o;
  o.path = path;
  o.labeled = labeled;
  o.image_shape = std::move(shape);
  return o;
}

// The message of the UserError that loading `text` raises ("" when it loads).
std::string load_error(const std::string& text, bool labeled = true, std::vector<int64_t> shape = {}) {
  std::string path = write_file("digit_csv_bad", "bad.csv", text);
  try {
    DigitCsv ds(csv_opts(path, labeled, shape));
    return "";
  } catch (const UserError& e) {
    return e.what();
  }
}

// A row of `n` pixels all equal to v, with an optional leading label.
std::string row(int n, int v, int label = -1) {
  std::string s = label >= 0 ? std::to_string(label) : "";
  for (int i = 0; i < n; ++i) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s + "\n";
}
}  // namespace

TEST_CASE("digit_csv loads the real MNIST train.csv: 8000 labeled 28x28 uint8 digits, every class") {
  std::string path = test::mnist_file("train.csv");
  auto t0 = std::chrono::steady_clock::now();
  DigitCsv ds(csv_opts(path));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("loaded " << ds.describe() << " in " << ms << " ms");  // speed is bench/'s job, never asserted here
  REQUIRE(ds.size() == 8000);
  CHECK(ds.labeled());
  CHECK(ds.num_classes() == 10);
  CHECK(ds.height() == 28);
  CHECK(ds.width() == 28);
  std::set<int64_t> classes;
  double total = 0;
  for (size_t i = 0; i < ds.size(); ++i) {
    Sample s = ds.get(i);
    REQUIRE(s.image.type() == CV_8UC1);
    REQUIRE(s.image.size() == cv::Size(28, 28));
    REQUIRE(s.label >= 0);
    REQUIRE(s.label <= 9);
    classes.insert(s.label);
    total += cv::sum(s.image)[0];
  }
  CHECK(classes.size() == 10);
  double mean = total / (8000.0 * 784 * 255);
  CHECK(mean == doctest::Approx(0.1310).epsilon(0.05));  // MNIST's well-known mean intensity
  CHECK(ds.describe() == "digit_csv " + path + ": 8000 samples, 28x28, labeled (10 classes)");
}

TEST_CASE("digit_csv loads the real unlabeled test.csv: 2000 images, labels -1") {
  DigitCsv ds(csv_opts(test::mnist_file("test.csv"), false));
  REQUIRE(ds.size() == 2000);
  CHECK_FALSE(ds.labeled());
  CHECK(ds.get(0).label == -1);
  CHECK(ds.get(1999).image.size() == cv::Size(28, 28));
  CHECK_THROWS_AS(ds.get(2000), std::out_of_range);
}

TEST_CASE("digit_csv refuses the wrong `labeled` for a Kaggle header, with the fix") {
  std::string e = load_error("pixel0,pixel1,pixel2,pixel3\n" + row(4, 1), true);
  CHECK(e.find(":1: header starts with \"pixel0\" but labeled = true") != std::string::npos);
  CHECK(e.find("set labeled = false") != std::string::npos);
  e = load_error("label,pixel0,pixel1,pixel2,pixel3\n" + row(4, 1, 3), false);
  CHECK(e.find("set labeled = true") != std::string::npos);
}

TEST_CASE("digit_csv: bad rows are UserErrors naming the file and the 1-based line") {
  const std::string header = "label,pixel0,pixel1,pixel2,pixel3\n";
  SUBCASE("wrong column count") {
    std::string e = load_error(header + row(4, 1, 0) + row(3, 1, 1));
    CHECK(e.find("bad.csv:3: row has 4 values (expected 5 values: a label and 4 pixels)") !=
          std::string::npos);
    e = load_error(header + row(5, 1, 0));
    CHECK(e.find("bad.csv:2: row has 6 values") != std::string::npos);
  }
  SUBCASE("not a number") {
    std::string e = load_error(header + row(4, 1, 0) + "1,2,x3,4,5\n");
    CHECK(e.find("bad.csv:3: column 3: \"x3\" is not an integer (expected a pixel value 0..255") !=
          std::string::npos);
    e = load_error(header + "1,0.5,0,0,0\n");  // 0..1 floats are not pixels
    CHECK(e.find("bad.csv:2: column 2: \"0.5\" is not an integer") != std::string::npos);
    e = load_error(header + "a,0,0,0,0\n");
    CHECK(e.find("bad.csv:2: column 1: \"a\" is not an integer (expected a label 0..9)") !=
          std::string::npos);
  }
  SUBCASE("label out of range") {
    std::string e = load_error(header + row(4, 1, 9) + row(4, 1, 10));
    CHECK(e.find("bad.csv:3: label 10 is out of range (expected 0..9 for num_classes = 10)") !=
          std::string::npos);
  }
  SUBCASE("pixel out of range") {
    std::string e = load_error(header + "1,0,256,0,0\n");
    CHECK(e.find("bad.csv:2: column 3: pixel value 256 is out of range (expected 0..255)") !=
          std::string::npos);
    e = load_error(header + "1,0,-1,0,0\n");
    CHECK(e.find("bad.csv:2: column 3: pixel value -1 is out of range") != std::string::npos);
  }
  SUBCASE("empty file, header only, blank line inside") {
    CHECK(load_error("").find("bad.csv:1: empty file") != std::string::npos);
    CHECK(load_error(header).find("no data rows") != std::string::npos);
    CHECK(load_error(header + row(4, 1, 0) + "\n" + row(4, 1, 0)).find("bad.csv:3: empty row") !=
          std::string::npos);
  }
  SUBCASE("pixel count that is not a square, without image_shape") {
    std::string e = load_error(row(10, 1, 0));
    CHECK(e.find("10 pixel columns is not a square image") != std::string::npos);
    CHECK(e.find("image_shape") != std::string::npos);
    CHECK(load_error(row(10, 1, 0), true, {3, 3}).find("but image_shape = [3, 3]") != std::string::npos);
  }
}

TEST_CASE("digit_csv: an 8x8 file without header works, image_shape gives non-square images") {
  std::string text;
  for (int i = 0; i < 20; ++i) text += row(64, i * 10, i % 10);
  std::string path = write_file("digit_csv_8x8", "digits8.csv", text);
  DigitCsv ds(csv_opts(path));
  REQUIRE(ds.size() == 20);
  CHECK(ds.height() == 8);
  CHECK(ds.width() == 8);
  Sample s = ds.get(13);
  CHECK(s.label == 3);
  CHECK(s.image.at<uint8_t>(7, 7) == 130);

  DigitCsv wide(csv_opts(path, true, {4, 16}));
  CHECK(wide.get(0).image.size() == cv::Size(16, 4));

  // Unlabeled, CRLF line ends, trailing blank lines: all fine.
  std::string crlf = "1,2,3,4\r\n5,6,7,8\r\n\r\n";
  DigitCsv small(csv_opts(write_file("digit_csv_crlf", "c.csv", crlf), false));
  REQUIRE(small.size() == 2);
  CHECK(small.get(1).image.at<uint8_t>(1, 1) == 8);
}

TEST_CASE("digit_csv: blank lines never inflate the memory reserved for the rows") {
  // One 1000x1000 row and 2,000,000 trailing blank lines (a 4 MB file): the reader once reserved
  // (lines x pixels) = 2 TB, a std::bad_alloc naming no file or line. The reservation is now
  // capped by the file size (fuzz/corpus/digit_csv/regress_reserve_blank_lines.csv is the small
  // version that the fuzzer's 256 MB allocation limit catches).
  std::string text = row(1000 * 1000, 7, 3) + std::string(2'000'000, '\n');
  DigitCsv ds(csv_opts(write_file("digit_csv_blank_tail", "big.csv", text)));
  REQUIRE(ds.size() == 1);
  CHECK(ds.height() == 1000);
  CHECK(ds.get(0).label == 3);
  CHECK(ds.get(0).image.at<uint8_t>(999, 999) == 7);
}

TEST_CASE("digit_csv::get returns a copy: changing it never changes the stored data") {
  std::string path = write_file("digit_csv_copy", "c.csv", row(4, 9, 1));
  DigitCsv ds(csv_opts(path));
  Sample a = ds.get(0);
  a.image.setTo(0);
  CHECK(ds.get(0).image.at<uint8_t>(0, 0) == 9);
}

TEST_CASE("digit_csv options from a recipe: missing file and bad image_shape are reported with positions") {
  std::string dir = test::temp_dir("digit_csv_opts");
  std::string recipe = dir + "/r.toml";
  std::ofstream(recipe)
      << "[ok]\nname = \"digit_csv\"\npath = \"" << test::mnist_file("test.csv")
      << "\"\nlabeled = false\nimage_shape = [28, 28]\n"
      << "[bad]\nname = \"digit_csv\"\npath = \"nowhere.csv\"\nimage_shape = [28]\nnum_classes = 0\n";
  RecipeDocument doc(recipe, {});
  DatasetRegistry reg("dataset");
  register_datasets(reg);
  Options root = doc.root();
  Options ok = root.table("ok", ""), bad = root.table("bad", "");
  auto factory = reg.parse(ok);
  reg.parse(bad);
  doc.finish();
  const auto& lines = doc.diagnostics().lines();
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  INFO(all);  // shown only when a check fails
  REQUIRE(lines.size() == 3);
  CHECK(all.find(recipe + ":8:8: bad.path: file not found: nowhere.csv") != std::string::npos);
  CHECK(all.find(recipe + ":9:15: bad.image_shape: expected [] or two values") != std::string::npos);
  CHECK(all.find(recipe + ":10:15: bad.num_classes: value 0 is out of range") != std::string::npos);
  REQUIRE(factory);
  auto ds = factory();
  CHECK(ds->size() == 2000);
}
