// The cores each rank of a local job keeps (pin_to_core_slice): every core of the process's
// affinity in exactly one slice, contiguous and in order, and nothing changed where it cannot apply.
#include "engine/core/cpu_threads.h"

#include <doctest/doctest.h>
#include <sched.h>

#include <vector>

namespace {

std::vector<int> allowed_cores() {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cores.push_back(c);
  return cores;
}

// Puts the affinity of the calling thread back as it was, whatever a check did.
struct RestoreAffinity {
  cpu_set_t saved;
  RestoreAffinity() { REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0); }
  ~RestoreAffinity() { sched_setaffinity(0, sizeof saved, &saved); }
};

}  // namespace

TEST_CASE("pin_to_core_slice: each index takes its own contiguous slice, together all the cores") {
  RestoreAffinity restore;
  const std::vector<int> all = allowed_cores();
  const int n = static_cast<int>(all.size());
  if (n < 2) {
    MESSAGE("one core here: only the cases that must not pin are checked");
  }
  for (int count = 2; count <= n; ++count) {
    std::vector<int> seen;
    for (int index = 0; index < count; ++index) {
      RestoreAffinity back;  // each slice is taken from the full set, as each rank does
      const int got = engine::pin_to_core_slice(index, count);
      const std::vector<int> mine = allowed_cores();
      CHECK(got == static_cast<int>(mine.size()));
      CHECK(got >= n / count);
      CHECK(got <= n / count + 1);
      seen.insert(seen.end(), mine.begin(), mine.end());
      CHECK(engine::usable_cores() == got);  // what the thread count of the rank is derived from
    }
    CHECK(seen == all);  // disjoint, in order, nothing left out
  }
  // Nothing to divide, or more slices than cores: nothing changes.
  CHECK(engine::pin_to_core_slice(0, 1) == 0);
  CHECK(engine::pin_to_core_slice(0, n + 1) == 0);
  CHECK(engine::pin_to_core_slice(2, 2) == 0);
  CHECK(allowed_cores() == all);
}
