// End-to-end runs of the engine binary on the real MNIST digits, small enough for CI: what a
// user checks in the run directory after `engine run`.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/io/safetensors.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine;
using namespace engine::test;

namespace {

std::vector<std::string> lines(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

CommandResult run_small(const std::string& out_dir, const std::string& extra = "") {
  mnist_file("train.csv");
  return run_command("cd " + source_path("") + " && " + engine_binary() + " run recipes/mnist_convnext.toml" + kSmallMnistRun +
                     " --set run.output_dir=" + out_dir + extra);
}

}  // namespace

TEST_CASE("engine run writes a complete run directory, and the same seed reproduces the same metrics") {
  std::string dir = temp_dir("run_a") + "/a";
  auto res = run_small(dir);
  REQUIRE_MESSAGE(res.exit_code == 0, res.output);

  // The resolved recipe has every default filled in and is itself a valid recipe.
  CHECK(read_text(dir + "/recipe.resolved.toml").find("label_smoothing = 0.1") != std::string::npos);
  CHECK(read_text(dir + "/recipe.resolved.toml").find("eval_batch_size = 0") != std::string::npos);

  auto jsonl = lines(dir + "/metrics.jsonl");
  int epochs = 0;
  for (const auto& l : jsonl) {
    auto j = nlohmann::json::parse(l);
    if (j["type"] == "epoch") {
      ++epochs;
      for (const char* k : {"train/loss", "valid/loss", "valid/accuracy", "valid/error_rate", "lr", "seconds", "images_per_s",
                            "eval_images_per_s"})
        CHECK_MESSAGE(j.contains(k), k);
      CHECK(j["valid/accuracy"].get<double>() + j["valid/error_rate"].get<double>() == doctest::Approx(1.0));
    }
  }
  CHECK(epochs == 2);
  CHECK(lines(dir + "/metrics.csv").size() == 3);

  // Weights: timm key names, no wrapper prefix, loadable.
  auto weights = load_safetensors(dir + "/model.safetensors");
  CHECK(weights.tensors.size() == 128);
  CHECK(weights.tensors[0].first == "stem.0.weight");
  CHECK(std::filesystem::exists(dir + "/checkpoints/best.safetensors"));
  // Resume checkpoints at both epoch ends (12 steps each), the newest two kept.
  CHECK(std::filesystem::exists(dir + "/checkpoints/step-000000012.safetensors"));
  CHECK(std::filesystem::exists(dir + "/checkpoints/step-000000024.safetensors"));

  auto sub = lines(dir + "/submission.csv");
  REQUIRE(sub.size() == 301);
  CHECK(sub[0] == "ImageId,Label");
  CHECK(sub[1].rfind("1,", 0) == 0);
  CHECK(sub[300].rfind("300,", 0) == 0);

  auto summary = nlohmann::json::parse(read_text(dir + "/summary.json"));
  CHECK(summary["valid/accuracy"].get<double>() > 0.5);  // 2 short epochs already learn digits
  CHECK(summary.contains("test/accuracy"));

  // Same seed, same machine: identical metrics.
  std::string dir2 = temp_dir("run_b") + "/b";
  auto res2 = run_small(dir2);
  REQUIRE_MESSAGE(res2.exit_code == 0, res2.output);
  auto s2 = nlohmann::json::parse(read_text(dir2 + "/summary.json"));
  CHECK(s2["valid/loss"].get<double>() == summary["valid/loss"].get<double>());
  CHECK(read_text(dir2 + "/submission.csv") == read_text(dir + "/submission.csv"));

  // A new run in the same directory (no --resume) that trains no epoch evaluates its own, untrained
  // weights: not the earlier run's best.safetensors that is still on disk.
  auto res3 = run_small(dir, " --set train.epochs=0");
  REQUIRE_MESSAGE(res3.exit_code == 0, res3.output);
  auto s3 = nlohmann::json::parse(read_text(dir + "/summary.json"));
  CHECK_MESSAGE(!s3.contains("best_epoch"), s3.dump());
  CHECK(res3.output.find("best epoch") == std::string::npos);
  CHECK(s3["valid/loss"].get<double>() != summary["valid/loss"].get<double>());
  CHECK(s3["valid/accuracy"].get<double>() < 0.5);  // ten classes, no training: about chance
}

TEST_CASE("the seed's convnext_small recipe runs a few steps") {
  std::string dir = temp_dir("small") + "/run";
  auto res = run_command("cd " + source_path("") + " && " + engine_binary() +
                         " run recipes/mnist_convnext_small.toml --set train.max_steps=2 --set data.batch_size=8"
                         " --set data.split.max_train=64 --set data.split.max_valid=16 --set predict.limit=8"
                         " --set run.output_dir=" + dir);
  REQUIRE_MESSAGE(res.exit_code == 0, res.output);
  CHECK(res.output.find("49459306 parameters") != std::string::npos);
  CHECK(lines(dir + "/submission.csv").size() == 9);
}

TEST_CASE("fp16 on a machine without CUDA is a clear error (exit 2), not a silent fp32 run") {
  std::string dir = temp_dir("fp16") + "/run";
  auto res = run_small(dir, " --set accelerator.mixed_precision=fp16 --set accelerator.device=cpu");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("fp16") != std::string::npos);
  CHECK(res.output.find("bf16") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir));
}
