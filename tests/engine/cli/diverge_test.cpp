// A run whose loss becomes NaN/inf stops at once with where it happened (exit 1), instead of
// training on garbage to the end: a real diverging run, SGD at lr 1e6 on the real MNIST digits.
#include <doctest/doctest.h>

#include <filesystem>
#include <regex>

#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

TEST_CASE("a diverging fp32 run stops with the step, batch and lr of the non-finite loss") {
  mnist_file("train.csv");
  const std::string dir = temp_dir("diverge");
  auto res = run_command("cd " + source_path("") + " && " + engine_binary() +
                         " run recipes/mnist_convnext.toml --set optimizer.name=sgd --set optimizer.lr=1e6"
                         " --set data.split.max_train=512 --set data.split.max_valid=32 --set train.epochs=1"
                         " --set data.batch_size=32 --set predict.limit=8 --set run.output_dir=" + dir + "/run");
  CHECK_MESSAGE(res.exit_code == 1, res.output);
  // e.g. "training loss is nan at step 2 (epoch 1, batch 2 of 16), lr 40000: the run diverged."
  std::smatch m;
  const std::regex said(R"(training loss is (nan|inf|-inf) at step (\d+) \(epoch 1, batch (\d+) of 16\), lr ([0-9.e+]+): the run diverged)");
  REQUIRE_MESSAGE(std::regex_search(res.output, m, said), res.output);
  CHECK(std::stoi(m[3]) == std::stoi(m[2]));  // one epoch: the step is the batch
  CHECK(std::stod(m[4]) > 1e3);               // the absurd lr is named (one_cycle starts at lr/25)
  // Stopped there: no final weights or predictions from garbage.
  CHECK_FALSE(std::filesystem::exists(dir + "/run/model.safetensors"));
  CHECK_FALSE(std::filesystem::exists(dir + "/run/submission.csv"));
}
