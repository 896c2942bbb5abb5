// The shared-memory all-reduce of single-node jobs, on 2 real processes (engine::launch forks them
// and gives them a private rendezvous, as `engine launch` does). Workers never use doctest: they
// throw on a wrong value (launch() then throws "rank R failed: <what>") or write what they saw to
// files that the parent checks.
#include "engine/accelerator/shared_memory_collectives.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "engine/core/errors.h"
#include "engine/launcher/launcher.h"
#include "tests/engine/accelerator/peer_failures.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

using engine::test::read_text;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

using engine::test::write_file;

// Runs `body` on 2 ranks whose collectives are Gloo wrapped by the shared-memory all-reduce; the
// body fails when the wrapper did not apply (it would silently test Gloo alone).
void on_two_ranks(const std::function<void(engine::Collectives&)>& body, std::chrono::milliseconds timeout = 10s) {
  engine::LaunchOptions o;
  o.master_port = 0;
  o.threads_per_process = 1;
  engine::launch(
      [&] {
        const auto world = engine::detect_world();
        auto gloo = engine::make_gloo_collectives(world, timeout);
        const engine::Collectives* inner = gloo.get();
        auto c = engine::with_shared_memory_all_reduce(std::move(gloo), world, timeout);
        expect(c.get() != inner, "the shared-memory all-reduce did not apply to a single-node launch");
        body(*c);
      },
      2, o);
}

}  // namespace

TEST_CASE("shared-memory all_reduce_sum: exact sums over several segments, any layout, other dtypes via Gloo") {
  // 4 KiB segments (the default is 1 MiB): every call below crosses several segments and slot
  // halves. The forked workers read this when they first reduce.
  setenv("ENGINE_SHM_SEGMENT_KB", "4", 1);
  CHECK_NOTHROW(on_two_ranks([](engine::Collectives& c) {
    const int r = c.rank();
    auto make = [](int rank) {
      return std::vector<torch::Tensor>{
          torch::arange(6400, torch::kFloat).reshape({64, 100}) * (rank + 1) + 0.25f,
          (torch::arange(2 * 40 * 7 * 7, torch::kFloat).reshape({2, 40, 7, 7}) * (rank + 1))
              .contiguous(torch::MemoryFormat::ChannelsLast),
          torch::full({3}, 0.5f * (rank + 1)),
          torch::zeros({0}),
      };
    };
    for (int round = 0; round < 3; ++round) {  // slots are reused call after call
      auto ts = make(r);
      c.all_reduce_sum(ts);
      auto a = make(0), b = make(1);
      for (size_t i = 0; i < ts.size(); ++i)
        expect(torch::equal(ts[i], a[i] + b[i]), "float tensor " + std::to_string(i) + " wrong");
      expect(ts[1].is_contiguous(torch::MemoryFormat::ChannelsLast), "layout changed");
    }
    std::vector<torch::Tensor> doubles{torch::arange(5000, torch::kDouble) * (r + 1)};
    c.all_reduce_sum(doubles);
    expect(torch::equal(doubles[0], torch::arange(5000, torch::kDouble) * 3), "double");
    std::vector<torch::Tensor> ints{torch::arange(5, torch::kLong) + 10 * r};  // not summed here: Gloo
    c.all_reduce_sum(ints);
    expect(torch::equal(ints[0], torch::arange(5, torch::kLong) * 2 + 10), "int64");
    std::vector<torch::Tensor> grown{torch::ones({300000}) * (r + 1)};  // larger than before: slots grow
    c.all_reduce_sum(grown);
    expect(torch::equal(grown[0], torch::full({300000}, 3.0f)), "grown");
  }));
  unsetenv("ENGINE_SHM_SEGMENT_KB");
}

TEST_CASE("shared-memory all_reduce_sum: a shape mismatch is Gloo's error naming every shape, then it still works") {
  std::string dir = engine::test::temp_dir("shm_mismatch");
  CHECK_NOTHROW(on_two_ranks([&](engine::Collectives& c) {
    const int r = c.rank();
    std::vector<torch::Tensor> ts{torch::ones({2}), torch::ones({r == 0 ? 64 : 32, 10})};
    std::string msg = "(no error)";
    try {
      c.all_reduce_sum(ts);
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    std::vector<torch::Tensor> ok{torch::ones({2})};
    c.all_reduce_sum(ok);
    expect(torch::equal(ok[0], torch::full({2}, 2.0f)), "unusable after a mismatch");
    write_file(dir + "/rank" + std::to_string(r), msg);
  }));
  for (int r = 0; r < 2; ++r) {
    std::string msg = read_text(dir + "/rank" + std::to_string(r));
    INFO("rank ", r, ": ", msg);
    CHECK(msg.find("all_reduce_sum: shape mismatch across ranks: rank 0 [64, 10], rank 1 [32, 10] (tensor 1 of 2)") !=
          std::string::npos);
  }
}

TEST_CASE("shared-memory all_reduce_sum: a SIGKILLed peer makes the survivor throw within a second, naming it") {
  std::string error;
  auto s = engine::test::killed_peer(on_two_ranks, "shm_killed", error);
  MESSAGE("survivor threw ", s.when, " ms after the kill: ", s.what);
  CHECK(s.when < 1000);
  CHECK(s.what.find("shared-memory all-reduce on rank 0 of 2: rank 1 (pid ") != std::string::npos);
  CHECK(s.what.find("is gone") != std::string::npos);
}

TEST_CASE("shared-memory all_reduce_sum: a live peer that never joins makes the call throw after the timeout") {
  auto s = engine::test::hung_peer(on_two_ranks, "shm_hung");
  INFO(s.what);
  CHECK(s.when >= 0.9);
  CHECK(s.when < 2.4);
  CHECK(s.what.find("did not arrive within 1 s") != std::string::npos);
}
