// Gloo collectives on 2 real processes (engine::launch forks them). Workers never use doctest:
// they throw on a wrong value (launch() then throws "rank R failed: <what>") or write what they
// saw to files that the parent checks.
#include <doctest/doctest.h>
#include <signal.h>
#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"
#include "engine/launcher/launcher.h"
#include "tests/engine/accelerator/peer_failures.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/threads.h"

using engine::test::read_text;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using engine::test::expect;

// Runs `body` on 2 ranks with a Gloo group; `timeout` bounds every collective.
void on_two_gloo_ranks(const std::function<void(engine::Collectives&)>& body,
                  std::chrono::milliseconds timeout = 10s) {
  engine::LaunchOptions o;
  o.master_port = 0;
  o.threads_per_process = 1;
  engine::launch(
      [&] {
        auto c = engine::make_gloo_collectives(engine::detect_world(), timeout);
        body(*c);
      },
      2, o);
}

using engine::test::write_text;
}  // namespace

TEST_CASE("gloo all_reduce_sum: exact sums of rank-dependent tensors, several dtypes") {
  // The parent runs OpenMP-parallel ops on 2 threads first (LibTorch 2.x's default is every core;
  // Debian's 1.13 starts with 1): forked workers, 2 threads each, must still compute (no pool hang).
  const engine::test::IntraOpThreads two_threads(2);
  torch::Tensor warm =
      (torch::ones({4000000}) * 2).sum() + torch::rand({256, 256}).mm(torch::rand({256, 256})).sum();
  CHECK(warm.item<double>() > 8000000);
  CHECK_NOTHROW(on_two_gloo_ranks([](engine::Collectives& c) {
    const int r = c.rank();
    torch::set_num_threads(2);
    auto make = [](int rank) {
      return std::vector<torch::Tensor>{
          torch::arange(640, torch::kFloat).reshape({64, 10}) * (rank + 1),
          torch::full({3}, 0.25 * (rank + 1), torch::kDouble),
          torch::arange(5, torch::kLong) + 10 * rank,
          torch::arange(12, torch::kFloat).reshape({3, 4}).t() * (rank + 2),  // non-contiguous
          torch::tensor(1.5f * rank),                                         // 0-dim
          torch::ones({1000003}) * (rank + 1)};                               // 4 MB
    };
    auto mine = make(r);
    auto want = make(0);
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] + make(1)[i];
    for (int round = 0; round < 2; ++round) {  // the group stays usable call after call
      auto got = make(r);
      c.all_reduce_sum(got);
      for (size_t i = 0; i < got.size(); ++i) {
        expect(torch::equal(got[i], want[i]),
               "tensor " + std::to_string(i) + " wrong on rank " + std::to_string(r));
        expect(got[i].sizes() == mine[i].sizes() && got[i].strides() == mine[i].strides(),
               "shape/strides changed");
      }
    }
    // Views of one flat buffer (how DDP lays out gradients) are reduced in place, empty ones too.
    auto flat = torch::arange(10, torch::kFloat) * (r + 1);
    std::vector<torch::Tensor> views{flat.narrow(0, 0, 4).view({2, 2}), flat.narrow(0, 4, 0),
                                     flat.narrow(0, 4, 6), torch::zeros({0}, torch::kDouble)};
    c.all_reduce_sum(views);
    expect(torch::equal(flat, torch::arange(10, torch::kFloat) * 3), "views of a flat buffer");
    std::vector<torch::Tensor> none;
    c.all_reduce_sum(none);
    c.barrier();
  }));
}

TEST_CASE("gloo all_gather: unequal dim 0 comes back in rank order, trimmed") {
  CHECK_NOTHROW(on_two_gloo_ranks([](engine::Collectives& c) {
    auto rows = [](int rank) {
      return rank == 0 ? torch::arange(6, torch::kFloat).reshape({3, 2})
                       : torch::arange(4, torch::kFloat).reshape({2, 2}) + 100;
    };
    auto got = c.all_gather(rows(c.rank()));
    expect(got.size() == 2, "expected 2 parts");
    expect(torch::equal(got[0], rows(0)) && torch::equal(got[1], rows(1)), "wrong parts");
    auto scalars = c.all_gather(torch::tensor(static_cast<int64_t>(7 + c.rank())));
    expect(torch::equal(torch::cat(scalars), torch::tensor({7, 8}, torch::kLong)), "scalars");
    auto empty = c.all_gather(torch::zeros({c.rank() == 0 ? 0 : 2, 3}));
    expect(empty[0].size(0) == 0 && empty[1].size(0) == 2, "empty part");
  }));
}

TEST_CASE("gloo broadcast: root's values overwrite the others, any root") {
  CHECK_NOTHROW(on_two_gloo_ranks([](engine::Collectives& c) {
    const bool root = c.rank() == 0;
    auto weight = torch::full({4, 4}, root ? 7.0f : 0.0f).requires_grad_();  // a parameter
    std::vector<torch::Tensor> ts{weight, torch::arange(3, torch::kLong) * (root ? 5 : 0),
                                  torch::full({2, 3}, root ? 1.0 : 9.0, torch::kDouble).t()};
    c.broadcast(ts, 0);
    expect(torch::equal(ts[0], torch::full({4, 4}, 7.0f)), "weight not overwritten");
    expect(torch::equal(ts[1], torch::tensor({0, 5, 10}, torch::kLong)), "ints");
    expect(torch::equal(ts[2], torch::full({3, 2}, 1.0, torch::kDouble)), "doubles");
    std::vector<torch::Tensor> from1{torch::full({3}, static_cast<float>(c.rank()))};
    c.broadcast(from1, 1);
    expect(torch::equal(from1[0], torch::ones({3})), "root 1");
  }));
}

TEST_CASE("gloo: a shape mismatch is an error on every rank naming every shape, then the group still works") {
  std::string dir = engine::test::temp_dir("gloo_mismatch");
  CHECK_NOTHROW(on_two_gloo_ranks([&](engine::Collectives& c) {
    const int r = c.rank();
    std::vector<torch::Tensor> ts{torch::ones({2}), torch::ones({r == 0 ? 64 : 32, 10})};
    std::string msg = "(no error)";
    try {
      c.all_reduce_sum(ts);
    } catch (const std::runtime_error& e) {
      msg = e.what();
    }
    try {
      c.all_gather(torch::ones({3, r == 0 ? 4 : 5}));
    } catch (const std::runtime_error& e) {
      msg += std::string("\n") + e.what();
    }
    std::vector<torch::Tensor> ok{torch::ones({2})};
    c.all_reduce_sum(ok);  // no hang, no poisoned group after a checked mismatch
    expect(torch::equal(ok[0], torch::full({2}, 2.0f)), "group unusable after mismatch");
    write_text(dir + "/rank" + std::to_string(r), msg);
  }));
  for (int r = 0; r < 2; ++r) {
    std::string msg = read_text(dir + "/rank" + std::to_string(r));
    INFO("rank ", r, ": ", msg);
    CHECK(msg.find("all_reduce_sum: shape mismatch across ranks: rank 0 [64, 10], rank 1 [32, 10] (tensor 1 "
                   "of 2)") != std::string::npos);
    CHECK(msg.find("all_gather: shape mismatch across ranks (only dim 0 may differ): rank 0 [3, 4], rank 1 "
                   "[3, 5]") != std::string::npos);
  }
}

TEST_CASE("gloo: a SIGKILLed peer makes the survivor's collective throw at once") {
  auto t0 = Clock::now();
  std::string error;
  auto s = engine::test::killed_peer(on_two_gloo_ranks, "gloo_killed", error);
  double launch_s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(error.find("rank 1 failed: killed by signal SIGKILL") != std::string::npos);
  CHECK(launch_s < 10.0);
  MESSAGE("survivor's collective threw ", s.when, " ms after the kill: ", s.what);
  CHECK(s.when < 10000);
  CHECK(s.what.find("all_reduce_sum failed on rank 0 of 2") != std::string::npos);
  CHECK(s.again.find("unusable after an earlier failure") != std::string::npos);
}

TEST_CASE("gloo: a peer that stops calling collectives makes the other's call throw after the timeout") {
  auto s = engine::test::hung_peer(on_two_gloo_ranks, "gloo_hung");
  INFO(s.what);
  CHECK(s.when >= 0.9);
  CHECK(s.when < 2.4);
  CHECK(s.what.find("all_reduce_sum failed on rank 0 of 2") != std::string::npos);
}

TEST_CASE("gloo: a rendezvous nobody joins fails after the timeout, naming the address") {
  engine::WorldInfo w;
  w.world_size = 2;
  w.master_port = engine::pick_free_port();
  for (int rank : {0, 1}) {  // 0: the store's server waits for workers; 1: a client finds no server
    w.rank = rank;
    auto t0 = Clock::now();
    std::string error;
    try {
      engine::make_gloo_collectives(w, 1s);
    } catch (const engine::RunError& e) {
      error = e.what();
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    INFO("rank ", rank, ": ", error);
    CHECK(error.find("rendezvous at 127.0.0.1:" + std::to_string(w.master_port)) != std::string::npos);
    CHECK(s < 5.0);
  }
}
