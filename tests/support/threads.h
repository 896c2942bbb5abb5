#pragma once
// The intra-op thread count for one scope, for tests that compare 1 and 2 threads: put back when the
// scope ends, also when a REQUIRE throws out of it, so that the tests after it in the same executable
// run with the count they were started with.
#include <ATen/Parallel.h>

namespace engine::test {

/// `IntraOpThreads threads(1); ... threads.set(2); ...`: at::set_num_threads for this scope.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int n) { set(n); }
  ~IntraOpThreads() { at::set_num_threads(before_); }
  IntraOpThreads(const IntraOpThreads&) = delete;
  IntraOpThreads& operator=(const IntraOpThreads&) = delete;
  void set(int n) const { at::set_num_threads(n); }

 private:
  int before_ = at::get_num_threads();
};

}  // namespace engine::test
