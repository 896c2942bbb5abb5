// `engine config` writes launch defaults like Accelerate's write_basic_config, never clobbers an
// existing file without --force, and `engine launch` uses them when its flags are absent.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

TEST_CASE("engine config writes defaults once, refuses to overwrite without --force") {
  std::string dir = temp_dir("config");
  std::string file = dir + "/launch.toml";
  auto first = run_command(engine_binary() + " config --config-file " + file);
  CHECK_MESSAGE(first.exit_code == 0, first.output);
  REQUIRE(std::filesystem::exists(file));
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text.find("num_processes = 1") != std::string::npos);  // no CUDA device here

  auto again = run_command(engine_binary() + " config --config-file " + file);
  CHECK(again.exit_code == 2);
  CHECK(again.output.find("--force") != std::string::npos);
  CHECK(run_command(engine_binary() + " config --force --config-file " + file).exit_code == 0);
}

TEST_CASE("engine launch takes num_processes from the config file when -n is absent") {
  std::string dir = temp_dir("config_launch");
  std::string file = dir + "/launch.toml";
  std::ofstream(file) << "num_processes = 2\nthreads_per_process = 1\n";
  auto res = run_command("cd " + source_path("") + " && " + engine_binary() + " launch --config-file " + file +
                         " --master-port 0 recipes/mnist_convnext.toml --set train.epochs=0 --set predict.limit=4"
                         " --set data.split.max_valid=10 --set run.output_dir=" + dir + "/run");
  CHECK_MESSAGE(res.exit_code == 0, res.output);
  CHECK(res.output.find("2 processes x 1 thread") != std::string::npos);

  std::ofstream(file) << "num_procesess = 2\n";
  auto bad = run_command(engine_binary() + " launch --config-file " + file + " recipes/mnist_convnext.toml");
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("did you mean \"num_processes\"") != std::string::npos);
}
