#include "engine/io/atomic_file.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "engine/core/errors.h"
#include "tests/support/paths.h"

using namespace engine;
namespace fs = std::filesystem;

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
}  // namespace

TEST_CASE("write_file_atomic creates, then replaces, and never leaves a .tmp behind") {
  auto dir = test::temp_dir("atomic");
  std::string p = dir + "/state.bin";
  write_file_atomic(p, std::string("first\0with nul", 14));
  CHECK(slurp(p) == std::string("first\0with nul", 14));
  CHECK(!fs::exists(p + ".tmp"));

  write_file_atomic(p, "second");  // replaces the existing file (rename over it)
  CHECK(slurp(p) == "second");
  CHECK(!fs::exists(p + ".tmp"));

  write_file_atomic(p, "");
  CHECK(fs::file_size(p) == 0);
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator()) == 1);
}

TEST_CASE("write_file_atomic fails clearly when the directory does not exist") {
  auto dir = test::temp_dir("atomic_missing");
  std::string p = dir + "/no/such/dir/file.bin";
  try {
    write_file_atomic(p, "x");
    FAIL("expected an error");
  } catch (const RunError& e) {
    CHECK(std::string(e.what()).find(p + ".tmp") != std::string::npos);
  }
  CHECK(!fs::exists(p + ".tmp"));
}

TEST_CASE("write_file_atomic with a bare file name writes to the working directory") {
  auto dir = test::temp_dir("atomic_cwd");
  auto old = fs::current_path();
  fs::current_path(dir);
  write_file_atomic("bare.txt", "ok");
  CHECK(slurp(dir + "/bare.txt") == "ok");
  fs::current_path(old);
}
