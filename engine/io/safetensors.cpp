#include "engine/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/errors.h"
#include "engine/io/atomic_file.h"
#include "engine/io/weights.h"  // shape_text

// The format is defined as little-endian; we copy tensor memory verbatim, so the host must be too.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace engine {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // the spec's limit: refuse before allocating

struct DtypeCode {
  const char* code;
  torch::ScalarType type;
};
constexpr DtypeCode kDtypes[] = {
    {"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf},  {"BF16", torch::kBFloat16},
    {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
    {"U8", torch::kByte},    {"BOOL", torch::kBool},
};
// Valid in the format but without a LibTorch 1.13 dtype: named precisely rather than "unknown".
const std::set<std::string> kUnsupported = {"U16",     "U32",     "U64", "C64",     "F8_E4M3",
                                            "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2"};

const char* code_of(torch::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.code;
  return nullptr;
}

[[noreturn]] void bad(const std::string& path, const std::string& problem) {
  throw UserError(path + ": not a valid safetensors file: " + problem);
}

// One header entry after validation of its own fields (the tiling check needs all of them).
struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!j.is_object()) bad(path, where + "header entry is not an object");
  if (!j.contains("dtype") || !j["dtype"].is_string()) bad(path, where + "missing or non-string \"dtype\"");
  if (!j.contains("shape") || !j["shape"].is_array()) bad(path, where + "missing or non-array \"shape\"");
  if (!j.contains("data_offsets") || !j["data_offsets"].is_array() || j["data_offsets"].size() != 2)
    bad(path, where + "\"data_offsets\" must be an array [begin, end]");
  Entry e{name, torch::kFloat, {}, 0, 0};
  std::string code = j["dtype"].get<std::string>();
  const DtypeCode* found = nullptr;
  for (const auto& d : kDtypes)
    if (code == d.code) found = &d;
  if (!found && kUnsupported.count(code))
    bad(path, where + "dtype " + code + " is not supported by this engine");
  if (!found) bad(path, where + "unknown dtype \"" + code + "\"");
  e.type = found->type;
  // Products are checked for overflow: a hostile shape must not wrap around to a "matching" size.
  uint64_t bytes = c10::elementSize(e.type);
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) bad(path, where + "shape entries must be non-negative integers");
    uint64_t v = d.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, v, &bytes))
      bad(path, where + "shape is too large");
    e.shape.push_back(static_cast<int64_t>(v));
  }
  for (const auto& o : j["data_offsets"])
    if (!o.is_number_unsigned()) bad(path, where + "data_offsets must be non-negative integers");
  e.begin = j["data_offsets"][0].get<uint64_t>();
  e.end = j["data_offsets"][1].get<uint64_t>();
  if (e.end < e.begin)
    bad(path, where + "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                  "] end before begin");
  if (e.end - e.begin != bytes)
    bad(path, where + "dtype " + code + " and shape " + shape_text(e.shape) + " need " +
                  std::to_string(bytes) + " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

// nlohmann keeps the last of duplicate keys silently; the spec forbids duplicates, so a parse
// callback tracks the keys of every open object and flags a repeat.
nlohmann::json parse_header(const std::string& path, const std::string& text) {
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  auto cb = [&](int, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) open.emplace_back();
    if (ev == E::object_end && !open.empty()) open.pop_back();
    if (ev == E::key && !open.empty() && !open.back().insert(parsed.get<std::string>()).second &&
        duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {
    bad(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (!duplicate.empty()) bad(path, "duplicate key \"" + duplicate + "\" in header");
  if (!j.is_object()) bad(path, "header is not a JSON object");
  return j;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the caller's order, so header order == data order == the order given.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<size_t> sizes{0};  // piece 0: the length prefix and header, then one per tensor
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      throw UserError(path + ": cannot save tensor \"" + name + "\": duplicate or reserved name");
    const char* code = t.defined() && t.layout() == torch::kStrided ? code_of(t.scalar_type()) : nullptr;
    if (!code) throw UserError(path + ": cannot save tensor \"" + name + "\": no safetensors dtype for it");
    const uint64_t n = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", code}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    sizes.push_back(n);
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');  // data then starts 8-byte aligned (8 + N)
  std::string head(8, '\0');
  const uint64_t n = json.size();
  std::memcpy(head.data(), &n, 8);
  head += json;
  sizes[0] = head.size();
  // Each tensor's bytes straight from its memory when it is a contiguous CPU tensor, else from a
  // contiguous CPU copy made just before it is written and dropped after: the file is never
  // assembled in memory, and at most one converted tensor exists at a time (a resume checkpoint of
  // a resnet34 is 255 MB, its channels-last weights a third of it).
  torch::Tensor current;
  write_file_atomic(path, sizes, [&](size_t i) -> std::string_view {
    if (i == 0) return head;
    current = tensors[i - 1].second.detach().to(torch::kCPU).contiguous();
    return {static_cast<const char*>(current.data_ptr()), static_cast<size_t>(current.numel()) * current.element_size()};
  });
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw UserError(path + ": file not found");
  const uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) throw UserError(path + ": cannot open for reading");
  if (size < 8)
    bad(path, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (n > kMaxHeader) bad(path, "header length " + std::to_string(n) + " exceeds the 100000000-byte limit");
  if (n > size - 8)
    bad(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                  std::to_string(size) + " bytes): truncated?");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) bad(path, "cannot read the header");
  nlohmann::json header = parse_header(path, text);

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key != "__metadata__") {
      entries.push_back(parse_entry(path, key, value));
      continue;
    }
    if (!value.is_object()) bad(path, "__metadata__ must be an object of strings");
    for (const auto& [mk, mv] : value.items()) {
      if (!mv.is_string()) bad(path, "__metadata__ value of \"" + mk + "\" is not a string");
      file.metadata[mk] = mv.get<std::string>();
    }
  }

  // Offsets must tile [0, buffer) exactly: sorted by position, each tensor starts where the
  // previous one ended. This rejects gaps, overlaps, out-of-range offsets and truncation at once.
  const uint64_t buffer = size - 8 - n;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const auto& e : entries) {
    std::string span = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.end > buffer)
      bad(path, "tensor \"" + e.name + "\": data_offsets " + span + " out of range: the data buffer has " +
                    std::to_string(buffer) + " bytes (truncated?)");
    if (e.begin < cursor) bad(path, "tensor \"" + e.name + "\" overlaps tensor \"" + prev->name + "\"");
    if (e.begin > cursor)
      bad(path, "gap of " + std::to_string(e.begin - cursor) + " bytes before tensor \"" + e.name + "\"");
    cursor = e.end;
    prev = &e;
  }
  if (cursor != buffer) bad(path, std::to_string(buffer - cursor) + " unused bytes after the last tensor");

  // Validated: read the buffer in one sequential pass, straight into each tensor's storage.
  for (const auto& e : entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    auto k = static_cast<std::streamsize>(e.end - e.begin);
    if (k && !in.read(static_cast<char*>(t.data_ptr()), k))
      bad(path, "read failed in tensor \"" + e.name + "\"");
    file.tensors.emplace_back(e.name, std::move(t));
  }
  return file;
}

}  // namespace engine
