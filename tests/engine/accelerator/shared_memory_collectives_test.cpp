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

using engine::test::expect;

using engine::test::write_text;

// Runs `body` on 2 ranks whose collectives are Gloo wrapped by the shared-memory all-reduce; the
// body fails when the wrapper did not apply (it would silently test Gloo alone).
void on_shm_ranks(int ranks, const std::function<void(engine::Collectives&)>& body, std::chrono::milliseconds timeout = 10s) {
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
      ranks, o);
}

void on_two_shm_ranks(const std::function<void(engine::Collectives&)>& body, std::chrono::milliseconds timeout = 10s) {
  on_shm_ranks(2, body, timeout);
}

}  // namespace

TEST_CASE("shared-memory all_reduce_sum: exact sums over several segments, any layout, other dtypes via Gloo") {
  // 4 KiB segments (the default is 1 MiB): every call below crosses several segments and slot
  // halves. The forked workers read this when they first reduce.
  setenv("ENGINE_SHM_SEGMENT_KB", "4", 1);
  CHECK_NOTHROW(on_two_shm_ranks([](engine::Collectives& c) {
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

// The DDP gradient buffer: one whole storage of >= 1 MiB, reduced step after step. From its second
// call on it lives in shared memory and is reduced in place; views of it (each parameter's .grad)
// follow the move; results are the bits the copying path and torch's own ops give. `moves` false:
// ENGINE_SHM_ARENA=0, the buffer stays where it is and goes through the copying path, as exact.
void check_arena(engine::Collectives& c, bool moves) {
  const int r = c.rank(), w = c.size();
  const int64_t n = 600000;  // 2.4 MB
  auto make = [&](int rank, int step) {  // exact in float: halves, small integers
    return (torch::arange(n, torch::kFloat).remainder(1000) * 0.5f * (rank + 1) + step).contiguous();
  };
  auto expected = [&](int step, bool mean) {
    torch::Tensor sum = make(0, step) + make(1, step);
    for (int q = 2; q < w; ++q) sum.add_(make(q, step));
    return mean ? sum.mul_(1.0 / w) : sum;
  };
  torch::Tensor grads = torch::empty({n});
  torch::Tensor view = grads.narrow(0, 1000, 500);  // taken before the move, as a parameter's .grad
  void* const first = grads.data_ptr();
  void* moved = nullptr;
  for (int step = 0; step < 5; ++step) {
    grads.copy_(make(r, step));
    std::vector<torch::Tensor> one{grads};
    const bool mean = step != 3;
    if (mean) c.all_reduce_mean(one);
    else c.all_reduce_sum(one);
    expect(torch::equal(grads, expected(step, mean)), "step " + std::to_string(step) + ": wrong values");
    expect(torch::equal(view, expected(step, mean).narrow(0, 1000, 500)), "a view did not follow the buffer");
    expect(static_cast<float*>(view.data_ptr()) == static_cast<float*>(grads.data_ptr()) + 1000, "view moved apart");
    if (!moves) expect(grads.data_ptr() == first, "ENGINE_SHM_ARENA=0, yet the buffer moved at step " + std::to_string(step));
    if (step == 1) moved = grads.data_ptr();
    if (step > 1) expect(grads.data_ptr() == moved, "the buffer moved again at step " + std::to_string(step));
    std::vector<torch::Tensor> loss{torch::tensor({1.0, 2.0}, torch::kDouble)};  // the step's small reduce
    c.all_reduce_sum(loss);
    expect(torch::equal(loss[0], torch::tensor({1.0, 2.0}, torch::kDouble) * w), "small reduce");
  }
  // The mapping is this rank's shared-memory object, not the allocator's memory.
  bool in_shm = false;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const auto dash = line.find('-'), space = line.find(' ');
    const auto lo = std::stoull(line.substr(0, dash), nullptr, 16), hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    const auto at = reinterpret_cast<uintptr_t>(moved);
    if (at >= lo && at < hi) in_shm = line.find("/dev/shm/engine-") != std::string::npos;
  }
  if (moves) expect(in_shm, "the gradient buffer is not in /dev/shm after its second call");
  else expect(!in_shm, "ENGINE_SHM_ARENA=0, yet the gradient buffer is in /dev/shm");
  // A new buffer after the old one is freed (an optimizer that rebuilt its arena): moved again, exact.
  grads = torch::Tensor();
  view = torch::Tensor();
  torch::Tensor fresh = torch::empty({n});
  for (int step = 0; step < 3; ++step) {
    fresh.copy_(make(r, step));
    std::vector<torch::Tensor> one{fresh};
    c.all_reduce_mean(one);
    expect(torch::equal(fresh, expected(step, true)), "new buffer, step " + std::to_string(step));
  }
}

TEST_CASE("shared-memory all-reduce of the gradient buffer: moved into shared memory, reduced in place, exact") {
  auto moving = [](engine::Collectives& c) { check_arena(c, true); };
  CHECK_NOTHROW(on_two_shm_ranks(moving));
  CHECK_NOTHROW(on_shm_ranks(3, moving));
}

// update_shared (the DDP step split over the ranks): the buffers move into shared memory once
// (views follow), every rank's update sees every rank's values and its writes reach every rank,
// the shares cover the elements once in rank order; a list that differs on one rank, or an empty
// one, gives false on every rank without calling the update, and the next call works again.
void check_update_shared(engine::Collectives& c) {
  const int r = c.rank(), w = c.size();
  const int64_t n = 1001;  // not a multiple of 16: the last share ends at n
  torch::Tensor a = torch::empty({n}), b = torch::zeros({n});
  torch::Tensor view = b.narrow(0, 10, 5);  // taken before the move, as a parameter's data
  auto sum_then_write = [&](float step) {
    return [&, step](const std::vector<int64_t>& edges, const engine::Collectives::PeerBuffers& peers) {
      expect(edges.size() == static_cast<size_t>(w) + 1 && edges.front() == 0 && edges.back() == n, "edges");
      for (int q = 0; q < w; ++q) {
        expect(edges[q] <= edges[q + 1] && (q == w - 1 || edges[q + 1] % 16 == 0), "shares: 16-element boundaries");
        expect(edges[q + 1] - edges[q] >= n / w - 16, "shares: balanced");
      }
      for (int64_t i = edges[r]; i < edges[r + 1]; ++i) {
        float s = 0;
        for (int q = 0; q < w; ++q) s += peers[0][q][i];
        for (int q = 0; q < w; ++q) peers[1][q][i] = s + static_cast<float>(i) + step;
      }
    };
  };
  auto expected = [&](float step) {
    float s = 0;
    for (int q = 0; q < w; ++q) s += static_cast<float>(q + 1);
    return torch::arange(n, torch::kFloat) + s + step;
  };
  void* moved = nullptr;
  for (int step = 0; step < 3; ++step) {
    a.fill_(static_cast<float>(r + 1));
    expect(c.update_shared({a, b}, sum_then_write(static_cast<float>(step))), "update_shared declined, step " + std::to_string(step));
    expect(torch::equal(b, expected(static_cast<float>(step))), "step " + std::to_string(step) + ": wrong values");
    expect(torch::equal(view, expected(static_cast<float>(step)).narrow(0, 10, 5)), "a view did not follow the buffer");
    if (step == 0) moved = b.data_ptr();
    else expect(b.data_ptr() == moved, "the buffer moved again at step " + std::to_string(step));
  }
  auto never = [](const std::vector<int64_t>&, const engine::Collectives::PeerBuffers&) {
    throw std::runtime_error("update called although a rank's buffers differ");
  };
  expect(!c.update_shared(r == 1 ? std::vector<torch::Tensor>{a} : std::vector<torch::Tensor>{a, b}, never),
         "buffers that differ between ranks were accepted");
  expect(!c.update_shared(r == 0 ? std::vector<torch::Tensor>{} : std::vector<torch::Tensor>{a, b}, never),
         "an empty list on rank 0 was not declined everywhere");
  a.fill_(static_cast<float>(r + 1));
  expect(c.update_shared({a, b}, sum_then_write(7)), "update_shared declined after the mismatches");
  expect(torch::equal(b, expected(7)), "after the mismatches: wrong values");
}

TEST_CASE("shared-memory update_shared: every rank's share of an element-wise update, visible to all ranks") {
  CHECK_NOTHROW(on_two_shm_ranks(check_update_shared));
  CHECK_NOTHROW(on_shm_ranks(3, check_update_shared));
}

TEST_CASE("shared-memory all-reduce with ENGINE_SHM_ARENA=0: the gradient buffer stays put and is reduced exactly") {
  setenv("ENGINE_SHM_ARENA", "0", 1);  // read by the forked workers' collectives
  CHECK_NOTHROW(on_two_shm_ranks([](engine::Collectives& c) { check_arena(c, false); }));
  unsetenv("ENGINE_SHM_ARENA");
}

TEST_CASE("shared-memory all_reduce_sum: a shape mismatch is Gloo's error naming every shape, then it still works") {
  std::string dir = engine::test::temp_dir("shm_mismatch");
  CHECK_NOTHROW(on_two_shm_ranks([&](engine::Collectives& c) {
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
    write_text(dir + "/rank" + std::to_string(r), msg);
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
  auto s = engine::test::killed_peer(on_two_shm_ranks, "shm_killed", error);
  MESSAGE("survivor threw ", s.when, " ms after the kill: ", s.what);
  CHECK(s.when < 1000);
  CHECK(s.what.find("shared-memory all-reduce on rank 0 of 2: rank 1 (pid ") != std::string::npos);
  CHECK(s.what.find("is gone") != std::string::npos);
}

TEST_CASE("shared-memory all_reduce_sum: a live peer that never joins makes the call throw after the timeout") {
  auto s = engine::test::hung_peer(on_two_shm_ranks, "shm_hung");
  INFO(s.what);
  CHECK(s.when >= 0.9);
  CHECK(s.when < 2.4);
  CHECK(s.what.find("did not arrive within 1 s") != std::string::npos);
}
