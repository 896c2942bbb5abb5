#pragma once
// Atomic writes: data goes to "<path>.tmp", is fsync'ed, then renamed over <path> and the
// directory is fsync'ed. Readers see the old file or the new one, never a torn one.
#include <string>
#include <string_view>
#include <vector>

namespace engine {

void write_file_atomic(const std::string& path, std::string_view bytes);

/// The same for a file made of several pieces written one after the other (a safetensors file: its
/// header, then each tensor's bytes straight from the tensor), without joining them in memory first.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);

}  // namespace engine
