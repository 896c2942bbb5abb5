#pragma once
// Shared by the collectives tests (Gloo, shared memory): the two failure scenarios every transport
// must survive, run on 2 real processes. Workers never use doctest: they write what they saw to
// files, which the parent reads back and checks.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

namespace engine::test {

/// Runs a body on 2 ranks with the transport under test; `timeout` bounds every collective.
using TwoRanks = std::function<void(const std::function<void(Collectives&)>&, std::chrono::milliseconds)>;

/// What the surviving rank saw: when its call threw (steady-clock ns, or seconds waited) and what.
struct Survivor {
  double when = 0;
  std::string what, again;
};

/// A worker's check: throws `what` (launch() then fails naming the rank) when `ok` is false.
inline void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

inline Survivor read_survivor(const std::string& path) {
  std::istringstream in(read_text(path));
  Survivor s;
  in >> s.when;
  in.ignore();
  std::getline(in, s.what);
  std::getline(in, s.again);
  return s;
}

/// Rank 1 is SIGKILLed while rank 0 waits in an all-reduce. Returns rank 0's report, `when` = ms
/// from the kill to the throw; `again` = what a barrier after it said. `error` gets launch()'s error.
inline Survivor killed_peer(const TwoRanks& on_two_ranks, const std::string& tag, std::string& error) {
  using Clock = std::chrono::steady_clock;
  const std::string dir = temp_dir(tag);
  try {
    on_two_ranks(
        [&](Collectives& c) {
          std::vector<torch::Tensor> ts{torch::ones({1000})};
          c.all_reduce_sum(ts);  // the group works
          if (c.rank() == 1) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 waits in the next call
            write_text(dir + "/killed_at", std::to_string(Clock::now().time_since_epoch().count()));
            raise(SIGKILL);
          }
          signal(SIGTERM, SIG_IGN);  // outlive launch()'s fail-fast SIGTERM long enough to report
          std::string what = "(no error)";
          try {
            c.all_reduce_sum(ts);
          } catch (const std::exception& e) {
            what = e.what();
          }
          auto caught = Clock::now().time_since_epoch().count();
          std::string again;
          try {
            c.barrier();  // after a transport failure, later calls fail at once
          } catch (const std::exception& e) {
            again = e.what();
          }
          write_text(dir + "/survivor", std::to_string(caught) + "\n" + what + "\n" + again);
          throw std::runtime_error(what);
        },
        std::chrono::seconds(10));
  } catch (const RunError& e) {
    error = e.what();
  }
  Survivor s = read_survivor(dir + "/survivor");
  s.when = (s.when - std::stod(read_text(dir + "/killed_at"))) / 1e6;
  return s;
}

/// Rank 1 stays alive but never joins rank 0's all-reduce; `timeout` 1 s. Returns rank 0's report,
/// `when` = seconds until its call threw.
inline Survivor hung_peer(const TwoRanks& on_two_ranks, const std::string& tag) {
  using Clock = std::chrono::steady_clock;
  const std::string dir = temp_dir(tag);
  on_two_ranks(
      [&](Collectives& c) {
        c.barrier();
        if (c.rank() == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // alive, never joins
          return;
        }
        auto t0 = Clock::now();
        std::string what = "(no error)";
        try {
          std::vector<torch::Tensor> ts{torch::ones({4})};
          c.all_reduce_sum(ts);
        } catch (const RunError& e) {
          what = e.what();
        }
        write_text(dir + "/rank0", std::to_string(std::chrono::duration<double>(Clock::now() - t0).count()) + "\n" + what);
      },
      std::chrono::seconds(1));
  return read_survivor(dir + "/rank0");
}

}  // namespace engine::test
