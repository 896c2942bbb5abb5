// engine export / engine predict / load_learner: one file rebuilds the predictor with no recipe
// and no training data, and gives the run's own evaluation probabilities and submission bytes.
#include <doctest/doctest.h>

#include <opencv2/imgcodecs.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/io/safetensors.h"
#include "engine/trainer/learner.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine;
using namespace engine::test;

namespace {

std::string digits_png() {
  const std::string dir = source_path("data/digits_png/images");
  REQUIRE_MESSAGE(std::filesystem::is_directory(dir), dir << " missing: run datasets/make_digit_pngs.sh (tools/setup.sh does)");
  return dir;
}

// valid_predictions.csv rows by image name: the probabilities of the run's own final evaluation.
std::map<std::string, std::vector<double>> eval_rows(const std::string& path) {
  std::map<std::string, std::vector<double>> out;
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream s(line);
    for (std::string x; std::getline(s, x, ',');) f.push_back(x);
    std::vector<double> p;
    for (size_t i = 6; i < f.size(); ++i) p.push_back(std::stod(f[i]));
    out[f[1]] = p;
  }
  return out;
}

}  // namespace

TEST_CASE("export -> predict on PNG files gives the run's evaluation probabilities, from the CLI and from C++") {
  const std::string dir = temp_dir("learner_png"), images = digits_png();
  std::ofstream(dir + "/r.toml")
      << "[run]\nname = \"png\"\noutput_dir = \"" << dir << "/run\"\n[accelerator]\nthreads = 1\n"
      << "[data]\ndataset = { name = \"file_names\", path = \"" << images
      << "\", files = \"[5-9]_00*.png\", label = { regex = \"^(\\\\d)_\" }, mode = \"gray\" }\n"
      << "split = { valid_fraction = 0.25, style = \"fastai\" }\nbatch_size = 16\n"
      << "[[data.train_transforms]]\nname = \"normalize\"\nmean = [0.131]\nstd = [0.3085]\n"
      << "[[data.eval_transforms]]\nname = \"resize\"\nsize = [32, 32]\n"
      << "[[data.eval_transforms]]\nname = \"normalize\"\nmean = [0.131]\nstd = [0.3085]\n"
      << "[model]\nname = \"resnet18\"\nin_chans = 1\nnum_classes = 5\n"
      << "[optimizer]\nname = \"adamw\"\nlr = 1e-3\n[train]\nepochs = 1\nmax_steps = 2\n";
  auto run = run_engine("run " + dir + "/r.toml");
  REQUIRE_MESSAGE(run.exit_code == 0, run.output);
  CHECK(read_text(dir + "/run/classes.json") == "[\"5\",\"6\",\"7\",\"8\",\"9\"]\n");

  auto ex = run_engine("export " + dir + "/run -o " + dir + "/digits.learner");
  REQUIRE_MESSAGE(ex.exit_code == 0, ex.output);
  // Save -> load bitwise: the export's weights are the run's kept weights, and no optimizer state.
  auto kept = load_safetensors(dir + "/run/model.safetensors"), exported = load_safetensors(dir + "/digits.learner");
  REQUIRE(kept.tensors.size() == exported.tensors.size());
  for (size_t i = 0; i < kept.tensors.size(); ++i) {
    CHECK(kept.tensors[i].first == exported.tensors[i].first);
    CHECK(torch::equal(kept.tensors[i].second, exported.tensors[i].second));
  }

  auto rows = eval_rows(dir + "/run/valid_predictions.csv");
  REQUIRE(rows.size() >= 4);
  std::vector<std::string> names;
  for (const auto& [name, p] : rows) names.push_back(name);
  names.resize(4);
  std::string args;
  for (const auto& n : names) args += " " + images + "/" + n;

  // The training data is gone: predict needs the export file only.
  auto pred = run_engine("predict --json " + dir + "/digits.learner" + args);
  REQUIRE_MESSAGE(pred.exit_code == 0, pred.output);
  auto j = nlohmann::json::parse(pred.output);
  REQUIRE(j.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const auto& want = rows.at(names[i]);
    auto got = j[i]["probabilities"].get<std::vector<double>>();
    REQUIRE(got.size() == want.size());
    for (size_t c = 0; c < got.size(); ++c) CHECK(std::abs(got[c] - want[c]) <= 1e-6);
    int64_t best = std::max_element(got.begin(), got.end()) - got.begin();
    CHECK(j[i]["index"].get<int64_t>() == best);
    CHECK(j[i]["label"].get<std::string>() == std::to_string(5 + best));
  }
  auto text = run_engine("predict " + dir + "/digits.learner " + images + "/" + names[0]);
  REQUIRE(text.exit_code == 0);
  CHECK(text.output.find(names[0] + ": ('") != std::string::npos);  // fastai's triple

  // The same from C++: load_learner(path).predict(image).
  auto learner = load_learner(dir + "/digits.learner");
  CHECK(learner->class_names() == std::vector<std::string>{"5", "6", "7", "8", "9"});
  cv::Mat img = cv::imread(images + "/" + names[1], cv::IMREAD_GRAYSCALE);
  Prediction p = learner->predict(img);
  const auto& want = rows.at(names[1]);
  for (size_t c = 0; c < want.size(); ++c) CHECK(std::abs(p.probabilities[c] - want[c]) <= 1e-6);
}

TEST_CASE("export -> predict --csv writes the run's submission.csv byte for byte (the Kaggle flow)") {
  const std::string dir = temp_dir("learner_csv");
  auto run = run_engine("run recipes/mnist_convnext.toml --set run.output_dir=" + dir +
                        "/run --set train.max_steps=3 --set data.split.max_train=256 --set data.split.max_valid=64"
                        " --set predict.limit=0 --set accelerator.threads=1");
  REQUIRE_MESSAGE(run.exit_code == 0, run.output);
  auto ex = run_engine("export " + dir + "/run");
  REQUIRE_MESSAGE(ex.exit_code == 0, ex.output);
  auto pred = run_engine("predict " + dir + "/run/model.export.safetensors --csv " + mnist_file("test.csv") + " -o " +
                         dir + "/submission.csv");
  REQUIRE_MESSAGE(pred.exit_code == 0, pred.output);
  const std::string a = read_text(dir + "/run/submission.csv"), b = read_text(dir + "/submission.csv");
  CHECK(a.size() > 2000 * 3);
  CHECK(a == b);
}

TEST_CASE("predict refuses what is not an export, and images of the wrong channel count (exit 2)") {
  const std::string dir = temp_dir("learner_bad");
  std::ofstream(dir + "/junk.safetensors") << "not a safetensors file";
  auto junk = run_engine("predict " + dir + "/junk.safetensors x.png");
  CHECK(junk.exit_code == 2);
  CHECK(junk.output.find("junk.safetensors") != std::string::npos);
}
