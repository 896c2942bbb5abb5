// Bad inputs of the image and pretrained-weights paths, as a user meets them on the command line:
// exit code 2, a message naming the file and the fix, and no run directory.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;
namespace fs = std::filesystem;

namespace {

std::string digits() {
  const std::string d = source_path("data/digits_png/images");
  REQUIRE_MESSAGE(fs::is_directory(d), d << " missing: run datasets/make_digit_pngs.sh (tools/setup.sh does)");
  return d;
}

// A folder of a few real digit PNGs (labels in the names).
std::string image_dir(const std::string& tag, int n = 12) {
  const std::string dir = temp_dir(tag) + "/images";
  fs::create_directories(dir);
  int copied = 0;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(digits())) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    if (copied == n) break;
    fs::copy_file(digits() + "/" + name, dir + "/" + name);
    ++copied;
  }
  return dir;
}

std::string bad_recipe(const std::string& dir, const std::string& dataset, const std::string& model_extra = "",
                   const std::string& model = "resnet18") {
  const std::string path = fs::path(dir).parent_path().string() + "/r.toml";
  std::ofstream(path) << "[run]\nname = \"bad\"\noutput_dir = \"" << fs::path(dir).parent_path().string() << "/run\"\n"
                      << "[data]\ndataset = " << dataset << "\nsplit = { valid_fraction = 0.25 }\nbatch_size = 4\n"
                      << "[[data.eval_transforms]]\nname = \"resize\"\nsize = [32, 32]\n"  // ConvNeXt's smallest
                      << "[model]\nname = \"" << model << "\"\nin_chans = 1\nnum_classes = 10\n" << model_extra
                      << "[optimizer]\nname = \"adamw\"\n[train]\nepochs = 1\nmax_steps = 1\n";
  return path;
}

std::string file_names(const std::string& dir, const std::string& extra = "") {
  return "{ name = \"file_names\", path = \"" + dir + "\", label = { regex = \"^(\\\\d)_\" }, classes = [\"0\", \"1\", \"2\", "
         "\"3\", \"4\", \"5\", \"6\", \"7\", \"8\", \"9\"]" + extra + " }";
}

void expect_exit2(const CommandResult& r, const std::vector<std::string>& needles, const std::string& run_dir) {
  CHECK_MESSAGE(r.exit_code == 2, r.output);
  for (const auto& n : needles) CHECK_MESSAGE(r.output.find(n) != std::string::npos, "missing \"" << n << "\" in:\n" << r.output);
  CHECK_FALSE(fs::exists(run_dir));
}

// A real resnet18 / convnext_atto weights file, written by an epochs = 0 run.
std::string weights_of(const std::string& model) {
  const std::string dir = image_dir("weights_" + model, 8);
  auto r = run_engine("run " + bad_recipe(dir, file_names(dir), "", model) + " --set train.epochs=0");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  return fs::path(dir).parent_path().string() + "/run/model.safetensors";
}

}  // namespace

TEST_CASE("bad pretrained files: corrupt, truncated, lying header, another architecture") {
  const std::string dir = image_dir("bad_weights");
  const std::string run_dir = fs::path(dir).parent_path().string() + "/run";
  const std::string good = weights_of("resnet18");
  const std::string base = fs::path(dir).parent_path().string();

  std::ofstream(base + "/corrupt.safetensors") << "\x13\x00\x00\x00garbage that is no header";
  expect_exit2(run_engine("run " + bad_recipe(dir, file_names(dir), "pretrained = \"" + base + "/corrupt.safetensors\"\n")),
               {"corrupt.safetensors"}, run_dir);

  {  // truncated: the first half of a real file
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(base + "/truncated.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    expect_exit2(run_engine("run " + bad_recipe(dir, file_names(dir), "pretrained = \"" + base + "/truncated.safetensors\"\n")),
                 {"truncated.safetensors"}, run_dir);
  }
  {  // a header whose offsets point past the data
    const std::string header = R"({"conv1.weight":{"dtype":"F32","shape":[64,1,7,7],"data_offsets":[0,999999]}})";
    std::string bytes(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    bytes += header + std::string(64, '\0');
    std::ofstream(base + "/lying.safetensors", std::ios::binary) << bytes;
    expect_exit2(run_engine("run " + bad_recipe(dir, file_names(dir), "pretrained = \"" + base + "/lying.safetensors\"\n")),
                 {"lying.safetensors"}, run_dir);
  }
  // A convnext checkpoint given to a resnet: one clear line, not hundreds of keys.
  const std::string convnext = weights_of("convnext_atto");
  auto other = run_engine("run " + bad_recipe(dir, file_names(dir), "pretrained = \"" + convnext + "\"\n"));
  expect_exit2(other, {"model.safetensors", "another architecture", "conv1.weight"}, run_dir);
  const std::string tail = other.output.substr(other.output.find("another architecture"));
  CHECK(std::count(tail.begin(), tail.end(), '\n') <= 1);  // one line, not a list of 250 keys
}

TEST_CASE("bad images: wrong channel count, unreadable file (or skipped), regex matching nothing, empty class folder") {
  const std::string dir = image_dir("bad_images");
  const std::string base = fs::path(dir).parent_path().string(), run_dir = base + "/run";

  // RGB images for a 1-channel model.
  auto rgb = run_engine("run " + bad_recipe(dir, file_names(dir, ", mode = \"rgb\"")));
  expect_exit2(rgb, {"3-channel", "in_chans"}, run_dir);

  // An unreadable image: named; with on_bad_sample = "skip" it is skipped and counted.
  std::ofstream(dir + "/3_99999.png") << "\x89PNG\r\n\x1a\n this is not an image";
  expect_exit2(run_engine("run " + bad_recipe(dir, file_names(dir))), {"3_99999.png"}, run_dir);
  auto skip = run_engine("run " + bad_recipe(dir, file_names(dir, ", on_bad_sample = \"skip\"")));
  CHECK_MESSAGE(skip.exit_code == 0, skip.output);
  CHECK(skip.output.find("skipped") != std::string::npos);
  fs::remove_all(run_dir);
  fs::remove(dir + "/3_99999.png");

  // A regex that matches no file name.
  auto none = run_engine("run " + bad_recipe(dir, "{ name = \"file_names\", path = \"" + dir + "\", label = { regex = \"^cat_(\\\\d)\" } }"));
  expect_exit2(none, {"matches no file name"}, run_dir);

  // image_folder with an empty class folder.
  const std::string folders = base + "/folders";
  fs::create_directories(folders + "/a");
  fs::create_directories(folders + "/b");
  for (const auto& e : fs::directory_iterator(dir)) fs::copy_file(e.path(), folders + "/a/" + e.path().filename().string());
  auto empty = run_engine("run " + bad_recipe(dir, "{ name = \"image_folder\", path = \"" + folders + "\" }") + " --set model.num_classes=2");
  expect_exit2(empty, {"folders/b"}, run_dir);
}
