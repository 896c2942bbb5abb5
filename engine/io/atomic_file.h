#pragma once
// Atomic writes: data goes to "<path>.tmp", is fsync'ed, then renamed over <path> and the
// directory is fsync'ed. Readers see the old file or the new one, never a torn one.
#include <string>
#include <string_view>

namespace engine {

void write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace engine
