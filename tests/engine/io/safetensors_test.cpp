#include "engine/io/safetensors.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "engine/core/errors.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A hand-made file: 8-byte little-endian header length, the header as given, then `data` bytes.
std::string raw_file(const std::string& dir, const std::string& name, const std::string& header, size_t data,
                     uint64_t header_len_override = 0) {
  uint64_t n = header_len_override ? header_len_override : header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  bytes += header + std::string(data, '\x01');
  std::string p = dir + "/" + name;
  write_bytes(p, bytes);
  return p;
}

std::string load_error(const std::string& path) {
  try {
    load_safetensors(path);
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("safetensors round-trips every dtype, empty and rank-0 tensors, and metadata") {
  torch::manual_seed(0);
  auto dir = test::temp_dir("st_roundtrip");
  NamedTensors in = {
      {"f32", torch::randn({2, 3})},
      {"f16", torch::randn({4}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"f64", torch::randn({3, 1, 2}, torch::kDouble)},
      {"i64", torch::arange(-2, 3, torch::kLong)},
      {"i32", torch::tensor({1, -7, 2147483647}, torch::kInt)},
      {"i16", torch::tensor({-3, 300}, torch::kShort)},
      {"i8", torch::tensor({-128, 127}, torch::kChar)},
      {"u8", torch::tensor({0, 255}, torch::kByte)},
      {"bool", torch::tensor({true, false, true})},
      {"empty", torch::zeros({0, 3})},
      {"scalar", torch::tensor(3.5f)},
      {"transposed", torch::arange(6, torch::kFloat).view({2, 3}).t()},  // non-contiguous input
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"epoch", "3"}};
  save_safetensors(dir + "/a.safetensors", in, meta);
  SafetensorsFile out = load_safetensors(dir + "/a.safetensors");
  CHECK(out.metadata == meta);
  REQUIRE(out.tensors.size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    CAPTURE(in[i].first);
    CHECK(out.tensors[i].first == in[i].first);  // file order is the order given
    CHECK((out.tensors[i].second.scalar_type() == in[i].second.scalar_type()));
    CHECK(out.tensors[i].second.sizes() == in[i].second.sizes());
    CHECK(torch::equal(out.tensors[i].second, in[i].second));
  }
}

TEST_CASE("the header is an 8-byte little-endian length, then JSON padded to a multiple of 8") {
  auto dir = test::temp_dir("st_layout");
  std::string path = dir + "/b.safetensors";
  save_safetensors(path, {{"w", torch::ones({3})}, {"b", torch::zeros({2}, torch::kLong)}});
  std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);  // explicit LE decode
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= bytes.size());
  std::string header = bytes.substr(8, n);
  auto j = nlohmann::json::parse(header);  // trailing padding spaces are valid JSON whitespace
  CHECK(!j.contains("__metadata__"));      // like timm: no metadata unless given
  CHECK(j["w"]["dtype"] == "F32");
  CHECK(j["w"]["shape"] == nlohmann::json::array({3}));
  CHECK(j["w"]["data_offsets"] == nlohmann::json::array({0, 12}));
  CHECK(j["b"]["dtype"] == "I64");
  CHECK(j["b"]["data_offsets"] == nlohmann::json::array({12, 28}));
  CHECK(bytes.size() == 8 + n + 28);
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  CHECK(first == 1.0f);
}

TEST_CASE("every corruption is a UserError naming the file and the problem") {
  auto dir = test::temp_dir("st_corrupt");
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  struct Case {
    std::string name, header, expect;
    size_t data;
  };
  std::vector<Case> cases = {
      {"overlap",
       "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32x2 + ",\"data_offsets\":[4,12]}}",
       "overlaps", 12},
      {"out_of_range", "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]}}", "out of range", 4},
      {"gap", "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32x2 + ",\"data_offsets\":[12,20]}}",
       "gap", 20},
      {"trailing", "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]}}", "unused bytes", 12},
      {"size_mismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "need 12 bytes", 8},
      {"bad_json", R"({"a":{"dtype":"F32",)", "not valid JSON", 0},
      {"not_object", "[1, 2]", "not a JSON object", 0},
      {"duplicate",
       "{\"a\":{" + f32x2 + ",\"data_offsets\":[0,8]},\"a\":{" + f32x2 + ",\"data_offsets\":[8,16]}}",
       "duplicate key \"a\"", 16},
      {"unknown_dtype", R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "unknown dtype", 4},
      {"unsupported_dtype", R"({"a":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})", "not supported", 2},
      {"negative_shape", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "non-negative", 4},
      {"bad_offsets", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "data_offsets", 4},
      {"huge_shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       "too large", 4},
      {"metadata_type", R"({"__metadata__":{"k":1}})", "not a string", 0},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::string p = raw_file(dir, c.name + ".safetensors", c.header, c.data);
    std::string err = load_error(p);
    CHECK(err.find(p) != std::string::npos);
    CHECK(err.find(c.expect) != std::string::npos);
  }

  SUBCASE("a truncated file") {
    std::string p = dir + "/t.safetensors";
    save_safetensors(p, {{"w", torch::ones({16})}});
    std::string bytes = read_bytes(p);
    write_bytes(p, bytes.substr(0, bytes.size() - 4));
    CHECK(load_error(p).find("out of range") != std::string::npos);
    write_bytes(p, bytes.substr(0, 5));
    CHECK(load_error(p).find("too short") != std::string::npos);
  }
  SUBCASE("a header length beyond the file or beyond the 100 MB cap") {
    std::string p = raw_file(dir, "long.safetensors", "{}", 0, 1000);
    CHECK(load_error(p).find("runs past the end of the file") != std::string::npos);
    p = raw_file(dir, "huge.safetensors", "{}", 0, 1ull << 40);
    CHECK(load_error(p).find("exceeds") != std::string::npos);
  }
  SUBCASE("a missing file") {
    CHECK(load_error(dir + "/nope.safetensors").find("file not found") != std::string::npos);
  }
}

TEST_CASE("an empty file list and empty tensors at the same offset are valid") {
  auto dir = test::temp_dir("st_empty");
  std::string p = raw_file(dir, "e.safetensors", "{}", 0);
  CHECK(load_safetensors(p).tensors.empty());
  p = raw_file(
      dir, "z.safetensors",
      R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})",
      2);
  auto f = load_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].first == "a");
  CHECK(f.tensors[1].second.numel() == 2);
}

TEST_CASE("saving rejects duplicate names and tensors without a safetensors dtype") {
  auto dir = test::temp_dir("st_save_bad");
  CHECK_THROWS_AS(save_safetensors(dir + "/d.safetensors", {{"a", torch::ones(1)}, {"a", torch::ones(1)}}),
                  UserError);
  CHECK_THROWS_AS(save_safetensors(dir + "/c.safetensors", {{"c", torch::ones(1, torch::kComplexFloat)}}),
                  UserError);
  CHECK(!std::filesystem::exists(dir + "/d.safetensors"));
}

TEST_CASE("tensors in any memory layout are written in the file's row-major order") {
  auto dir = test::temp_dir("st_layouts");
  torch::manual_seed(3);
  auto nchw = torch::randn({4, 3, 5, 2});
  auto channels_last = nchw.contiguous(torch::MemoryFormat::ChannelsLast);  // same values, other memory
  auto transposed = torch::randn({6, 7}).t();                              // a non-contiguous view
  auto sliced = torch::arange(40, torch::kLong).view({8, 5}).narrow(1, 1, 3);
  save_safetensors(dir + "/m.safetensors", {{"cl", channels_last}, {"t", transposed}, {"s", sliced}});
  auto f = load_safetensors(dir + "/m.safetensors");
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].second.sizes() == nchw.sizes());
  CHECK(torch::equal(f.tensors[0].second, nchw));
  CHECK(torch::equal(f.tensors[1].second, transposed));
  CHECK(torch::equal(f.tensors[2].second, sliced));
  // Byte for byte what the contiguous tensors give.
  save_safetensors(dir + "/c.safetensors", {{"cl", nchw}, {"t", transposed.contiguous()}, {"s", sliced.contiguous()}});
  CHECK(read_bytes(dir + "/m.safetensors") == read_bytes(dir + "/c.safetensors"));
}
