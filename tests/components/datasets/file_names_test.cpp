#include "components/datasets/file_names.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <set>

#include "components/datasets/all.h"
#include "components/datasets/digit_csv.h"
#include "engine/recipe/options.h"
#include "tests/components/datasets/digit_images.h"
#include "tests/support/paths.h"

using namespace engine;
namespace fs = std::filesystem;

namespace {
FileNamesOptions by_regex(const std::string& path, const std::string& regex = "^(\\d)_") {
  FileNamesOptions o;
  o.path = path;
  o.label_regex = regex;
  return o;
}

const std::vector<std::string> kDigits = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};

// The train.csv row in a name like "7_00042.png" or "images/7_00042.png".
size_t row_of(const std::string& name) { return std::stoul(name.substr(name.size() - 9, 5)); }

// Every diagnostic line of parsing table [t] of a recipe, and the factory it gave.
std::string recipe_errors(const std::string& toml, DatasetRegistry::Factory* factory = nullptr) {
  std::string recipe = test::temp_dir("file_names_recipe") + "/r.toml";
  std::ofstream(recipe) << toml;
  RecipeDocument doc(recipe, {});
  DatasetRegistry reg("dataset");
  register_datasets(reg);
  Options root = doc.root();
  Options t = root.table("t", "");
  auto f = reg.parse(t);
  if (factory) *factory = f;
  doc.finish();
  std::string all;
  for (const auto& l : doc.diagnostics().lines()) all += l + "\n";
  return all;
}
}  // namespace

TEST_CASE("file_names reads real digits labeled by regex: classes sorted, labels and pixels of train.csv") {
  auto d = test::write_digit_pngs("fn_digits", 300, false);
  FileNames ds(by_regex(d.dir));
  REQUIRE(ds.size() == 300);
  CHECK(ds.labeled());
  CHECK(ds.class_names() == kDigits);
  CHECK(ds.channels() == 1);
  CHECK(ds.describe() == "file_names " + d.dir + ": 300 images, 10 classes, gray");
  std::set<size_t> rows;
  for (size_t i = 0; i < ds.size(); ++i) {
    const size_t row = row_of(ds.sample_name(i));
    rows.insert(row);
    Sample s = ds.get(i);
    REQUIRE(s.label == d.labels[row]);
    REQUIRE(cv::norm(s.image, d.images[row], cv::NORM_INF) == 0);
    if (i > 0) REQUIRE(ds.sample_name(i - 1) < ds.sample_name(i));  // sorted paths
  }
  CHECK(rows.size() == 300);

  // A glob selects files; a fixed vocabulary orders the classes.
  auto o = by_regex(d.dir);
  o.files = "[37]_*.png";
  FileNames two(o);
  CHECK(two.class_names() == std::vector<std::string>{"3", "7"});
  for (size_t i = 0; i < two.size(); ++i)
    REQUIRE(d.labels[row_of(two.sample_name(i))] == (two.label(i) ? 7 : 3));
  o.images.classes = {"7", "3", "5"};
  FileNames fixed(o);
  CHECK(fixed.num_classes() == 3);
  for (size_t i = 0; i < fixed.size(); ++i)
    REQUIRE(d.labels[row_of(fixed.sample_name(i))] == (fixed.label(i) ? 3 : 7));
  o.images.classes = {"7"};
  CHECK(test::user_error([&] { FileNames ds(o); }).find("has label \"3\", which is not in classes = [7]") !=
        std::string::npos);
  o.files = "*.PNG";
  CHECK(test::user_error([&] {
          FileNames ds(o);
        }).find("files = \"*.PNG\" selects none of the 300 image files") != std::string::npos);
}

TEST_CASE("file_names on data/digits_png (datasets/make_digit_pngs.sh): 8000 digits, labels of train.csv") {
  const std::string root = test::source_path("data/digits_png");
  if (!fs::exists(root + "/images")) FAIL("missing " << root << "/images (run datasets/make_digit_pngs.sh)");
  DigitCsvOptions co;
  co.path = test::mnist_file("train.csv");
  DigitCsv csv(co);
  auto t0 = std::chrono::steady_clock::now();
  FileNames ds(by_regex(root));  // recursive: the images/ folder
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("built (listed, read, decoded) " << ds.describe() << " in " << ms << " ms");  // speed is bench/'s job
  REQUIRE(ds.size() == 8000);
  CHECK(ds.class_names() == kDigits);
  CHECK(ds.describe() == "file_names " + root + ": 8,000 images, 10 classes, gray");
  CHECK(ds.sample_name(0) == "images/0_00005.png");
  for (size_t i = 0; i < ds.size(); i += 37) {
    const size_t row = row_of(ds.sample_name(i));
    Sample s = ds.get(i);
    REQUIRE(s.label == csv.label(row));
    REQUIRE(cv::norm(s.image, csv.get(row).image, cv::NORM_INF) == 0);
  }
}

TEST_CASE("file_names regex errors: matches nothing, misses some names, no capture group, two groups") {
  auto d = test::write_digit_pngs("fn_regex", 30, false);
  std::string err = test::user_error([&] { FileNames ds(by_regex(d.dir, "^x(\\d)")); });
  CHECK(err.find("label.regex \"^x(\\d)\" matches no file name (e.g. 0_") != std::string::npos);

  cv::imwrite(d.dir + "/extra.png", d.images[0]);
  cv::imwrite(d.dir + "/notes_1.png", d.images[1]);
  err = test::user_error([&] { FileNames ds(by_regex(d.dir)); });
  CHECK(err.find("does not match 2 of 32 file names: extra.png, notes_1.png") != std::string::npos);
  auto o = by_regex(d.dir);
  o.files = "[0-9]_*";  // narrowing the glob leaves them out
  CHECK(FileNames(o).size() == 30);

  err = test::user_error([&] { FileNames ds(by_regex(d.dir, "^\\d_")); });
  CHECK(err.find("has no capture group") != std::string::npos);
  err = test::user_error([&] { FileNames ds(by_regex(d.dir, "^(\\d)_(\\d)")); });
  CHECK(err.find("has 2 capture groups, expected one") != std::string::npos);
  err = test::user_error([&] { FileNames ds(by_regex(d.dir, "^((\\d)_")); });
  CHECK(err.find("does not compile") != std::string::npos);
}

TEST_CASE("file_names rule first_upper (fastai Pets): True/False classes, unlabeled images, recursion") {
  auto d = test::write_digit_pngs("fn_pets", 6, false);
  std::string dir = test::temp_dir("fn_pets_named");
  const std::vector<std::string> names = {"Abyssinian_1.png", "Bengal_2.png",     "beagle_3.png",
                                          "pug_4.png",        "sub/Sphynx_5.png", "sub/yorkshire_6.png"};
  for (size_t k = 0; k < names.size(); ++k) {
    fs::create_directories(fs::path(dir + "/" + names[k]).parent_path());
    REQUIRE(cv::imwrite(dir + "/" + names[k], d.images[k]));
  }
  FileNamesOptions o;
  o.path = dir;
  o.label_rule = "first_upper";
  FileNames pets(o);
  REQUIRE(pets.size() == 6);
  CHECK(pets.class_names() == std::vector<std::string>{"False", "True"});
  std::vector<int64_t> labels;
  for (size_t i = 0; i < pets.size(); ++i) labels.push_back(pets.label(i));
  // sorted paths: Abyssinian, Bengal, beagle, pug, sub/Sphynx, sub/yorkshire
  CHECK(labels == std::vector<int64_t>{1, 1, 0, 0, 1, 0});
  CHECK(pets.sample_name(4) == "sub/Sphynx_5.png");
  o.recursive = false;
  CHECK(FileNames(o).size() == 4);

  FileNamesOptions u;
  u.path = dir;
  u.labeled = false;
  FileNames unlabeled(u);
  CHECK_FALSE(unlabeled.labeled());
  CHECK(unlabeled.size() == 6);
  CHECK(unlabeled.num_classes() == 0);
  CHECK(unlabeled.get(3).label == -1);
  CHECK(unlabeled.describe() == "file_names " + dir + ": 6 images, unlabeled, gray");
  u.images.classes = {"False", "True"};  // the training classes, so predictions map back to names
  CHECK(FileNames(u).class_names() == std::vector<std::string>{"False", "True"});

  test::write_bytes(dir + "/Broken_7.png", "");
  CHECK(test::user_error([&] { FileNames ds(o); }).find(dir + "/Broken_7.png: empty file (0 bytes)") !=
        std::string::npos);
  o.images.on_bad_sample = "skip";
  CHECK(FileNames(o).describe() ==
        "file_names " + dir + ": 4 images (1 unreadable skipped), 2 classes, gray");
}

TEST_CASE("file_names options from a recipe: label rules checked with positions, all errors at once") {
  auto d = test::write_digit_pngs("fn_opts", 20, false);
  DatasetRegistry::Factory factory;
  std::string all =
      recipe_errors("[t]\nname = \"file_names\"\npath = \"" + d.dir +
                        "\"\nfiles = \"*.png\"\nlabel = { regex = \"^(\\\\d)_\" }\nmode = \"rgb\"\n",
                    &factory);
  CHECK(all == "");
  REQUIRE(factory);
  auto ds = factory();
  CHECK(ds->size() == 20);
  CHECK(ds->channels() == 3);
  CHECK(ds->sample_name(0).find("0_") == 0);

  all = recipe_errors("[t]\nname = \"file_names\"\npath = \"" + d.dir + "\"\n");
  CHECK(all.find("t.label: labeled = true needs a label rule") != std::string::npos);
  all = recipe_errors(
      "[t]\nname = \"file_names\"\npath = \"nowhere\"\n"
      "label = { regex = \"^\\\\d_\", rule = \"first_uper\" }\n");
  INFO(all);
  CHECK(all.find(":3:8: t.path: directory not found: nowhere") != std::string::npos);
  CHECK(all.find("t.label.rule: unknown value \"first_uper\"") != std::string::npos);
  CHECK(all.find("did you mean \"first_upper\"") != std::string::npos);
  all = recipe_errors("[t]\nname = \"file_names\"\npath = \"" + d.dir +
                      "\"\nlabel = { regex = \"^\\\\d_\" }\n");
  CHECK(all.find(":4:19: t.label.regex: regex \"^\\d_\" has no capture group") != std::string::npos);
  all = recipe_errors("[t]\nname = \"file_names\"\npath = \"" + d.dir +
                      "\"\nlabeled = false\nlabel = { rule = \"first_upper\" }\n");
  CHECK(all.find("t.label: a label rule is set but labeled = false") != std::string::npos);
}
