#include "tests/support/paths.h"

#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <vector>

namespace fs = std::filesystem;

namespace engine::test {

std::string source_path(const std::string& relative) { return std::string(ENGINE_SOURCE_DIR) + "/" + relative; }

std::string engine_binary() { return ENGINE_BINARY; }

std::string mnist_file(const std::string& name) {
  std::string p = source_path("data/mnist/" + name);
  if (!fs::exists(p)) FAIL("real MNIST data missing: " << p << " (run datasets/fetch_mnist.sh)");
  return p;
}

namespace {
std::vector<fs::path>& made_dirs() {
  static std::vector<fs::path> dirs;
  return dirs;
}
}  // namespace

std::string temp_dir(const std::string& tag) {
  fs::path p = fs::temp_directory_path() / ("engine_test_" + tag + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  made_dirs().push_back(p);
  return p.string();
}

void remove_temp_dirs() {
  std::error_code ec;  // best effort: a directory a test already removed is fine
  for (const auto& p : made_dirs()) fs::remove_all(p, ec);
  made_dirs().clear();
}

}  // namespace engine::test
