#pragma once
// Atomic writes: data goes to "<path>.tmp", is fsync'ed, then renamed over <path> and the
// directory is fsync'ed. Readers see the old file or the new one, never a torn one.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace engine {

void write_file_atomic(const std::string& path, std::string_view bytes);

/// The same for a file made of pieces written one after the other, each produced only when it is
/// written: piece(i) returns piece i's bytes (exactly sizes[i] of them), which need stay valid only
/// until piece(i + 1) is asked for. A safetensors file (its header, then each tensor's bytes, a
/// channels-last weight converted to the file's row-major order just before it is written) is then
/// never joined in memory, and holds at most one converted tensor at a time.
void write_file_atomic(const std::string& path, const std::vector<size_t>& sizes,
                       const std::function<std::string_view(size_t)>& piece);

}  // namespace engine
