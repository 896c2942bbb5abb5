#include "tests/support/paths.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <unistd.h>

namespace fs = std::filesystem;

namespace engine::test {

std::string source_path(const std::string& relative) { return std::string(ENGINE_SOURCE_DIR) + "/" + relative; }

std::string engine_binary() { return ENGINE_BINARY; }

std::string mnist_file(const std::string& name) {
  std::string p = source_path("data/mnist/" + name);
  if (!fs::exists(p)) FAIL("real MNIST data missing: " << p << " (run datasets/fetch_mnist.sh)");
  return p;
}

std::string temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("engine_test_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

}  // namespace engine::test
