// libFuzzer target: load_safetensors (engine/io/safetensors.cpp), the reader of every weights
// file and checkpoint the engine loads, ours or downloaded.
//   Input: the file's bytes. Expected: the tensors, or engine::UserError naming the file.
//   Anything else (another exception, std::bad_alloc from a size in the header, a crash, an
//   ASan/UBSan report, a hang) is a finding.
// The seeds in fuzz/corpus/safetensors/ were written by the engine's save_safetensors: a small
// model-like file (conv/BN/head keys, every supported dtype, an empty and a rank-0 tensor,
// metadata), one tensor with metadata, and no tensors at all.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/errors.h"
#include "engine/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("engine_st_fuzz_" + std::to_string(getpid()) + ".safetensors"))
                                      .string();
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), size);
  try {
    engine::SafetensorsFile f = engine::load_safetensors(path);
    for (auto& [name, t] : f.tensors) t.sum();  // touch every element that was read
  } catch (const engine::UserError& e) {
    // the expected outcome of a bad file; ENGINE_FUZZ_VERBOSE=1 shows it (checking a seed)
    if (std::getenv("ENGINE_FUZZ_VERBOSE")) std::fprintf(stderr, "UserError: %s\n", e.what());
  }
  return 0;
}
