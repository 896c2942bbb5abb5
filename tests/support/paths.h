#pragma once
// Where tests find the repository's files and the real MNIST data (fetched by datasets/fetch_mnist.sh).
#include <string>

namespace engine::test {

/// Absolute path of a file in the source tree, e.g. source_path("recipes/mnist_convnext.toml").
std::string source_path(const std::string& relative);
/// The built `engine` binary.
std::string engine_binary();
/// data/mnist/<name>; fails the test with a clear message when the data was not fetched.
std::string mnist_file(const std::string& name);
/// `--set` overrides that shrink recipes/mnist_convnext.toml to a 2-epoch run of 12 steps each
/// (384 train / 200 valid images, batch 32, 300 predictions): the run and resume tests' size.
inline constexpr const char* kSmallMnistRun =
    " --set data.split.max_train=384 --set data.split.max_valid=200 --set train.epochs=2"
    " --set predict.limit=300 --set data.batch_size=32";
/// A fresh empty directory in the system temp dir, named by tag and pid (emptied on each call).
/// Removed when the test process ends with every test case passed (tests/doctest_main.cpp); kept
/// for a look when one failed, or always with ENGINE_TEST_KEEP=1.
std::string temp_dir(const std::string& tag);
/// Removes every directory temp_dir() made in this process.
void remove_temp_dirs();

}  // namespace engine::test
