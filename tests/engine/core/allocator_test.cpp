#include "engine/core/allocator.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>

namespace {
long minor_faults() {
  rusage r{};
  getrusage(RUSAGE_SELF, &r);
  return r.ru_minflt;
}

// Allocates, fills and frees a buffer of `bytes` `times` times, as a training step does with an
// activation; returns the page faults it took.
long faults_of_reuse(size_t bytes, int times) {
  const long before = minor_faults();
  for (int i = 0; i < times; ++i) {
    auto* p = static_cast<char*>(std::malloc(bytes));
    REQUIRE(p != nullptr);
    std::memset(p, i, bytes);
    asm volatile("" : : "r"(p) : "memory");  // keep the compiler from eliding malloc/memset/free
    std::free(p);
  }
  return minor_faults() - before;
}
}  // namespace

TEST_CASE("tune_allocator: ENGINE_MALLOC_TUNING=0 leaves malloc alone and says so") {
  setenv("ENGINE_MALLOC_TUNING", "0", 1);
  const auto t = engine::tune_allocator();
  unsetenv("ENGINE_MALLOC_TUNING");
  CHECK_FALSE(t.applied);
  CHECK(t.reason.find("ENGINE_MALLOC_TUNING=0") != std::string::npos);
}

TEST_CASE("tune_allocator: a freed 64 MiB buffer is reused without faulting its pages in again") {
#if !defined(__GLIBC__)
  MESSAGE("not glibc: nothing to check");
  return;
#endif
  const auto t = engine::tune_allocator();
  if (!t.applied) {  // e.g. the user's own GLIBC_TUNABLES: their setting, not ours, is in force
    MESSAGE("skipped: " << t.reason);
    return;
  }
  const size_t bytes = size_t{64} << 20;
  const long pages = static_cast<long>(bytes / 4096);
  // glibc's default serves 64 MiB with mmap and unmaps it on free: 10 rounds fault ~10x the pages.
  // Tuned, only the first round faults its pages in; the other nine reuse them.
  const long faults = faults_of_reuse(bytes, 10);
  INFO("minor faults for 10 rounds of 64 MiB: " << faults << " (one round = " << pages << " pages)");
  CHECK(faults < 2 * pages);
}
