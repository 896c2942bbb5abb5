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
/// A fresh empty directory in the system temp dir, named by tag and pid (emptied on each call).
std::string temp_dir(const std::string& tag);

}  // namespace engine::test
