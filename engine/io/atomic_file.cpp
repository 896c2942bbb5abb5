#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "engine/core/errors.h"

namespace engine {
namespace {

// A failed write is a failed run (disk full, directory removed under us), not bad input: RunError.
[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw RunError("cannot " + what + " " + path + ": " + std::strerror(err));
}

// write(2) may write less than asked and may be interrupted: loop until everything is out.
void write_all(int fd, std::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", path, errno);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The rename is only durable once the directory entry itself is on disk.
void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("open directory", dir, errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems (and tmpfs on old kernels) refuse fsync on directories: not a data-loss risk
  // we can do anything about, so only real I/O errors are fatal.
  if (rc != 0 && err != EINVAL && err != ENOTSUP) fail("fsync directory", dir, err);
}

// Fault injection for the torn-write tests: ENGINE_FAULT_INJECT=<stage>@<text> kills the process
// (_exit(99), like a power cut or kill -9: no cleanup) at <stage> of writing a file whose path
// contains <text>. Stages: "partial" (half the bytes written), "unrenamed" (all written and
// fsynced, not yet renamed), "renamed" (renamed, directory not yet fsynced).
void fault_point(const char* stage, const std::string& path) {
  static const std::string spec = [] {
    const char* e = std::getenv("ENGINE_FAULT_INJECT");
    return std::string(e ? e : "");
  }();
  if (spec.empty()) return;
  const auto at = spec.find('@');
  if (at == std::string::npos || spec.compare(0, at, stage) != 0) return;
  if (path.find(spec.substr(at + 1)) == std::string::npos) return;
  std::fprintf(stderr, "ENGINE_FAULT_INJECT: dying at stage %s of writing %s\n", stage, path.c_str());
  _exit(99);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, {bytes.size()}, [&](size_t) { return bytes; });
}

void write_file_atomic(const std::string& path, const std::vector<size_t>& sizes,
                       const std::function<std::string_view(size_t)>& piece_at) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create", tmp, errno);
  try {
    // Under fault injection, the "partial" fault point comes after half the bytes.
    bool partial_due = std::getenv("ENGINE_FAULT_INJECT") != nullptr;
    size_t half = 0, written = 0;
    for (size_t size : sizes) half += size;
    half /= 2;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string_view piece = piece_at(i);
      if (piece.size() != sizes[i])
        throw std::logic_error("write_file_atomic: piece " + std::to_string(i) + " of " + path + " has " +
                               std::to_string(piece.size()) + " bytes, announced " + std::to_string(sizes[i]));
      if (partial_due && written + piece.size() >= half) {
        write_all(fd, piece.substr(0, half - written), tmp);
        fault_point("partial", path);
        piece.remove_prefix(half - written);
        written = half;
        partial_due = false;
      }
      write_all(fd, piece, tmp);
      written += piece.size();
    }
    // Data must be on disk before the rename makes it visible, or a crash could expose an empty file.
    if (::fsync(fd) != 0) fail("fsync", tmp, errno);
    if (::close(fd) != 0) {
      fd = -1;
      fail("close", tmp, errno);
    }
    fd = -1;
    fault_point("unrenamed", path);
    if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename " + tmp + " to", path, errno);
    fault_point("renamed", path);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());  // never leave a stale .tmp behind
    throw;
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  fsync_dir(dir.empty() ? "." : dir);
}

}  // namespace engine
