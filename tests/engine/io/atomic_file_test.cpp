#include "engine/io/atomic_file.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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

TEST_CASE("write_file_atomic asks for each piece once, in order, and refuses a piece of another size") {
  auto dir = test::temp_dir("atomic_pieces");
  std::string p = dir + "/pieces.bin";
  const std::vector<std::string> parts{"abc", "", "hello"};
  std::vector<size_t> asked;
  std::string current;  // valid until the next piece is asked for, as the contract allows
  write_file_atomic(p, {3, 0, 5}, [&](size_t i) -> std::string_view {
    asked.push_back(i);
    current = parts[i];
    return current;
  });
  CHECK(asked == std::vector<size_t>{0, 1, 2});
  CHECK(slurp(p) == "abchello");
  // A producer that breaks its announced size: an error, the old file kept, no .tmp left.
  CHECK_THROWS_AS(write_file_atomic(p, {3, 4}, [&](size_t i) -> std::string_view { return i ? "toolong" : "new"; }),
                  std::logic_error);
  CHECK(slurp(p) == "abchello");
  CHECK(!fs::exists(p + ".tmp"));
}
