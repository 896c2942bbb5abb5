#pragma once
// Process-wide malloc settings for a training process.
#include <string>

namespace engine {

/// What tune_allocator() did, for a test or a log line.
struct AllocatorTuning {
  bool applied = false;  ///< true when the engine's malloc settings are in force
  std::string reason;    ///< one line: what was set, or why nothing was
};

/// Makes glibc malloc keep freed tensor buffers for reuse instead of handing them back to the OS.
///
/// By default glibc serves every allocation above a (dynamic, at most 32 MiB) threshold with its
/// own mmap and unmaps it on free, and trims the heap as soon as its free top passes a few MiB. A
/// training step allocates and frees the same large activations and gradients every step, so
/// each step paid munmap + mmap + a page fault per 4 KiB page: a third of training time went to
/// the kernel (see bench/RESULTS.md). This sets, through mallopt:
///   - M_MMAP_THRESHOLD 1 GiB: buffers below it come from the heap, where free() keeps them;
///   - M_TRIM_THRESHOLD 1 GiB: the heap is not shrunk until 1 GiB of its top is free;
///   - M_TOP_PAD 256 MiB: the heap grows in large steps, so fewer brk calls.
/// Memory is still returned when the process exits; peak RSS is the peak of live tensors, as before.
///
/// Call it first thing in main(), before any thread starts. Idempotent. It does nothing, and says
/// why, when:
///   - GLIBC_TUNABLES already names a glibc.malloc setting (the user's own choice wins);
///   - ENGINE_MALLOC_TUNING=0 is set (to measure the engine without it, as bench/ does);
///   - the C library is not glibc.
/// With another malloc preloaded (LD_PRELOAD of jemalloc, tcmalloc) the settings reach glibc's
/// malloc, which then serves nothing: that allocator's own policy applies.
AllocatorTuning tune_allocator();

}  // namespace engine
