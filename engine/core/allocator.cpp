#include "engine/core/allocator.h"

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "engine/core/env.h"

namespace engine {

namespace {
// 1 GiB: far above any single activation of the shipped recipes (tens of MiB at most), below
// mallopt's int limit. glibc 2.36 accepts thresholds above its old 32 MiB cap through mallopt.
constexpr int kMmapThreshold = 1 << 30;
constexpr int kTrimThreshold = 1 << 30;
// 256 MiB of extra heap per brk: address space only, pages become resident when first touched.
constexpr int kTopPad = 256 << 20;
}  // namespace

AllocatorTuning tune_allocator() {
#if defined(__GLIBC__)
  if (switched_off("ENGINE_MALLOC_TUNING"))
    return {false, "ENGINE_MALLOC_TUNING=0: glibc malloc defaults"};
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc."))
    return {false, "GLIBC_TUNABLES sets glibc.malloc: the user's settings apply"};
  // Setting M_MMAP_THRESHOLD also turns off glibc's dynamic threshold, which otherwise moves the
  // threshold (and the trim threshold with it) as buffers are freed: the policy stays the one set here.
  const bool ok = mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
                  mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1 &&
                  mallopt(M_TOP_PAD, kTopPad) == 1;
  if (!ok) return {false, "mallopt refused a setting: glibc malloc defaults"};
  return {true, "glibc malloc: mmap_threshold 1 GiB, trim_threshold 1 GiB, top_pad 256 MiB"};
#else
  return {false, "not glibc: the C library's malloc defaults"};
#endif
}

}  // namespace engine
