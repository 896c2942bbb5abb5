#include "components/datasets/image_folder.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <opencv2/imgcodecs.hpp>
#include <thread>

#include "components/datasets/all.h"
#include "engine/recipe/options.h"
#include "tests/components/datasets/digit_images.h"
#include "tests/support/paths.h"

using namespace engine;
namespace fs = std::filesystem;

namespace {
ImageFolderOptions folder(const std::string& path, const std::string& mode = "auto",
                          const std::string& on_bad = "error") {
  ImageFolderOptions o;
  o.path = path;
  o.images.mode = mode;
  o.images.on_bad_sample = on_bad;
  return o;
}

bool same_pixels(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}
}  // namespace

TEST_CASE("image_folder reads real digits by class folder: sorted classes, labels and pixels of train.csv") {
  auto d = test::write_digit_pngs("imgf_digits", 300, true);
  std::map<std::string, size_t> written;
  for (size_t k = 0; k < d.names.size(); ++k) written[d.names[k]] = k;

  ImageFolder ds(folder(d.dir));
  REQUIRE(ds.size() == 300);
  CHECK(ds.labeled());
  CHECK(ds.num_classes() == 10);
  CHECK(ds.class_names() == std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  CHECK(ds.channels() == 1);
  CHECK(ds.files().holds_bytes());
  CHECK(ds.describe() == "image_folder " + d.dir + ": 300 images, 10 classes, gray");
  for (size_t i = 0; i < ds.size(); ++i) {
    const std::string name = ds.sample_name(i);
    REQUIRE(written.count(name) == 1);
    const size_t k = written[name];
    Sample s = ds.get(i);
    REQUIRE(s.label == d.labels[k]);  // folder "7" -> label 7, the CSV's label for that row
    REQUIRE(ds.label(i) == d.labels[k]);
    REQUIRE(same_pixels(s.image, d.images[k]));
    if (i > 0) REQUIRE(ds.label(i - 1) <= ds.label(i));  // grouped by class, in class order
  }
  CHECK(ds.sample_name(0).rfind("0/", 0) == 0);
}

TEST_CASE("image_folder get() is thread-safe and gives the same images whether bytes are held or re-read") {
  auto d = test::write_digit_pngs("imgf_threads", 200, true);
  ImageFolder held(folder(d.dir));
  auto o = folder(d.dir);
  o.images.hold_bytes_limit = 0;  // every get() reads its file again
  ImageFolder disk(o);
  CHECK(held.files().holds_bytes());
  CHECK_FALSE(disk.files().holds_bytes());
  REQUIRE(disk.size() == held.size());
  std::vector<cv::Mat> a(held.size()), b(held.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < held.size(); i += 4) {
        a[i] = held.get(i).image;
        b[i] = disk.get(i).image;
      }
    });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < held.size(); ++i) {
    REQUIRE(same_pixels(a[i], b[i]));
    REQUIRE(same_pixels(a[i], held.get(i).image));
  }
  // A file that breaks after validation fails in get() with its name (only the disk path sees it).
  test::write_bytes(d.dir + "/" + disk.sample_name(3), "");
  CHECK(test::user_error([&] {
          disk.get(3);
        }).find(disk.sample_name(3) + ": empty file (0 bytes) (it was readable") != std::string::npos);
  CHECK(same_pixels(held.get(3).image, a[3]));
}

TEST_CASE("image_folder modes: gray digits as rgb, colour files come back in RGB order, or as gray") {
  auto d = test::write_digit_pngs("imgf_modes", 40, true);
  ImageFolder rgb(folder(d.dir, "rgb"));
  CHECK(rgb.channels() == 3);
  Sample s = rgb.get(5);
  REQUIRE(s.image.type() == CV_8UC3);
  std::vector<cv::Mat> planes;
  cv::split(s.image, planes);
  CHECK(same_pixels(planes[0], planes[2]));
  CHECK(cv::countNonZero(planes[1]) > 50);  // a real digit, not a blank image
  CHECK(rgb.describe().find(", rgb") != std::string::npos);

  // OpenCV writes and reads BGR: a pixel stored as (B, G, R) = (10, 20, 200) is red, and an RGB
  // dataset must return (200, 20, 10). One red PNG, one blue PNG, one blue JPEG with an
  // upper-case extension (extensions are case-insensitive).
  std::string dir = test::temp_dir("imgf_colour");
  fs::create_directories(dir + "/blue");
  fs::create_directories(dir + "/red");
  REQUIRE(cv::imwrite(dir + "/red/a.png", cv::Mat(6, 7, CV_8UC3, cv::Scalar(10, 20, 200))));
  REQUIRE(cv::imwrite(dir + "/blue/b.png", cv::Mat(3, 4, CV_8UC3, cv::Scalar(220, 30, 5))));
  REQUIRE(cv::imwrite(dir + "/blue/c.JPG", cv::Mat(16, 16, CV_8UC3, cv::Scalar(220, 30, 5))));
  for (const char* mode : {"rgb", "auto"}) {
    CAPTURE(mode);
    ImageFolder ds(folder(dir, mode));
    REQUIRE(ds.size() == 3);
    CHECK(ds.channels() == 3);
    CHECK(ds.class_names() == std::vector<std::string>{"blue", "red"});
    CHECK(ds.sample_name(2) == "red/a.png");
    Sample red = ds.get(2);
    CHECK(red.label == 1);
    CHECK(red.image.size() == cv::Size(7, 6));  // images keep their own sizes
    CHECK(red.image.at<cv::Vec3b>(0, 0) == cv::Vec3b(200, 20, 10));
    CHECK(ds.get(0).image.at<cv::Vec3b>(2, 3) == cv::Vec3b(5, 30, 220));
    cv::Vec3b jpeg = ds.get(1).image.at<cv::Vec3b>(8, 8);  // lossy: roughly (5, 30, 220)
    CHECK(jpeg[0] < 40);
    CHECK(jpeg[2] > 190);
  }
  ImageFolder gray(folder(dir, "gray"));
  CHECK(gray.channels() == 1);
  Sample g = gray.get(2);
  REQUIRE(g.image.type() == CV_8UC1);
  CHECK(std::abs(g.image.at<uint8_t>(0, 0) - 73) <= 1);  // 0.299 R + 0.587 G + 0.114 B

  // auto needs every file to agree; the error names one file of each kind.
  REQUIRE(cv::imwrite(dir + "/red/d_gray.png", cv::Mat(5, 5, CV_8UC1, cv::Scalar(90))));
  std::string err = test::user_error([&] { ImageFolder ds(folder(dir, "auto")); });
  CHECK(err.find("blue/b.png is colour (3 channels)") != std::string::npos);
  CHECK(err.find("red/d_gray.png is gray (1 channel)") != std::string::npos);
  CHECK(err.find("set mode = \"gray\" or mode = \"rgb\"") != std::string::npos);
  CHECK(ImageFolder(folder(dir, "rgb")).size() == 4);
}

TEST_CASE("image_folder errors: missing dir, no class folders, an empty class folder, classes fixed") {
  std::string missing = test::temp_dir("imgf_missing") + "/nowhere";
  CHECK(test::user_error([&] { ImageFolder ds(folder(missing)); }).find(missing + ": directory not found") !=
        std::string::npos);

  auto flat = test::write_digit_pngs("imgf_flat", 20, false);
  std::string err = test::user_error([&] { ImageFolder ds(folder(flat.dir)); });
  CHECK(err.find("no class sub-folders") != std::string::npos);
  CHECK(err.find("it holds 20 images directly") != std::string::npos);
  CHECK(err.find("file_names") != std::string::npos);

  auto d = test::write_digit_pngs("imgf_empty", 60, true);
  fs::create_directories(d.dir + "/7b");
  test::write_bytes(d.dir + "/7b/notes.txt", "not an image");
  err = test::user_error([&] { ImageFolder ds(folder(d.dir)); });
  CHECK(err.find("class folder " + d.dir + "/7b has no image files") != std::string::npos);
  CHECK(err.find("it has 1 other files") != std::string::npos);
  fs::remove_all(d.dir + "/7b");
  fs::create_directories(d.dir + "/.ipynb_checkpoints");  // hidden folders are not classes

  auto o = folder(d.dir);
  o.images.classes = {"9", "8", "7", "6", "5", "4", "3", "2", "1", "0", "10"};  // order fixed by the recipe
  ImageFolder fixed(o);
  CHECK(fixed.num_classes() == 11);
  for (size_t i = 0; i < fixed.size(); ++i) REQUIRE(fixed.sample_name(i)[0] - '0' == 9 - fixed.label(i));
  o.images.classes = {"0", "1", "2", "3", "4", "5", "6", "7", "8"};
  err = test::user_error([&] { ImageFolder ds(o); });
  CHECK(err.find("class folder \"9\" is not in classes") != std::string::npos);
}

TEST_CASE(
    "image_folder: corrupt, truncated and zero-byte files are UserErrors naming them; skip counts them") {
  auto d = test::write_digit_pngs("imgf_bad", 100, true);
  const std::string png = test::read_bytes(d.dir + "/" + d.names[0]);
  REQUIRE(png.size() > 100);
  std::vector<uint8_t> jpg;
  REQUIRE(cv::imencode(".jpg", d.images[1], jpg));
  const std::string jpeg(jpg.begin(), jpg.end());
  // Whole chunks, but scrambled image data: only decoding finds it.
  std::string corrupt_idat = png;
  const size_t idat = png.find("IDAT");
  REQUIRE(idat != std::string::npos);
  for (size_t k = idat + 8; k < idat + 24; ++k) corrupt_idat[k] = static_cast<char>(corrupt_idat[k] ^ 0x5a);
  std::vector<uint8_t> prog;
  REQUIRE(cv::imencode(".jpg", d.images[2], prog, {cv::IMWRITE_JPEG_PROGRESSIVE, 1}));
  const std::string progressive(prog.begin(), prog.end());
  // Complete JPEGs are fine, baseline and progressive (several scans), with bytes after the end.
  test::write_bytes(d.dir + "/1/good.jpg", jpeg + std::string(300, '\0'));
  test::write_bytes(d.dir + "/2/good_progressive.jpeg", progressive);
  CHECK(ImageFolder(folder(d.dir)).size() == 102);

  struct Bad {
    std::string name, bytes, why;
  };
  const std::vector<Bad> bad = {
      {"3/garbage.png", std::string(2000, '\x5a'), "cannot decode the image"},
      {"3/truncated.png", png.substr(0, png.size() / 2),
       "truncated PNG (the file ends inside its IDAT chunk)"},
      {"3/zbad_crc.png", corrupt_idat, "cannot decode the image"},
      {"4/empty.png", "", "empty file (0 bytes)"},
      {"5/truncated.jpg", jpeg.substr(0, jpeg.size() * 2 / 3), "truncated JPEG"},
      {"5/truncated_progressive.jpg", progressive.substr(0, progressive.size() - 40), "truncated JPEG"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.name);
    test::write_bytes(d.dir + "/" + b.name, b.bytes);
    std::string err = test::user_error([&] { ImageFolder ds(folder(d.dir)); });
    CHECK(err.find(d.dir + "/" + b.name + ": " + b.why) != std::string::npos);
    CHECK(err.find("on_bad_sample = \"skip\"") != std::string::npos);
    fs::remove(d.dir + "/" + b.name);
  }
  for (const auto& b : bad) test::write_bytes(d.dir + "/" + b.name, b.bytes);
  std::string err = test::user_error([&] { ImageFolder ds(folder(d.dir)); });
  CHECK(err.find("3/garbage.png") != std::string::npos);  // the first in sorted order
  CHECK(err.find("(and 5 more unreadable files)") != std::string::npos);

  ImageFolder skip(folder(d.dir, "auto", "skip"));
  CHECK(skip.size() == 102);
  CHECK(skip.files().skipped() == 6);
  CHECK(skip.describe() == "image_folder " + d.dir + ": 102 images (6 unreadable skipped), 10 classes, gray");
  for (size_t i = 0; i < skip.size(); ++i)
    REQUIRE(skip.sample_name(i).find("truncated") == std::string::npos);
}

TEST_CASE("image_folder options from a recipe: registered, path and mode checked with positions") {
  auto d = test::write_digit_pngs("imgf_recipe", 30, true);
  std::string recipe = d.dir + "/../imgf_recipe.toml";
  std::ofstream(recipe) << "[ok]\nname = \"image_folder\"\npath = \"" << d.dir << "\"\nmode = \"rgb\"\n"
                        << "[bad]\nname = \"image_folder\"\npath = \"nowhere\"\nmode = \"rbg\"\n"
                        << "on_bad_sample = \"ignore\"\nclasses = [\"a\", \"a\"]\n";
  RecipeDocument doc(recipe, {});
  DatasetRegistry reg("dataset");
  register_datasets(reg);
  Options root = doc.root();
  Options ok = root.table("ok", ""), bad = root.table("bad", "");
  auto factory = reg.parse(ok);
  reg.parse(bad);
  doc.finish();
  std::string all;
  for (const auto& l : doc.diagnostics().lines()) all += l + "\n";
  INFO(all);
  CHECK(doc.diagnostics().lines().size() == 4);
  CHECK(all.find(":7:8: bad.path: directory not found: nowhere") != std::string::npos);
  CHECK(all.find(":8:8: bad.mode: unknown value \"rbg\"") != std::string::npos);
  CHECK(all.find("did you mean \"rgb\"") != std::string::npos);
  CHECK(all.find("bad.on_bad_sample: unknown value \"ignore\"") != std::string::npos);
  CHECK(all.find("bad.classes: class \"a\" is listed twice") != std::string::npos);
  REQUIRE(factory);
  auto ds = factory();
  CHECK(ds->size() == 30);
  CHECK(ds->channels() == 3);
}
