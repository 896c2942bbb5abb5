// BackgroundWriter: jobs run off the calling thread one at a time, in order; a job's error comes
// back from the next submit() or wait(), never lost; the destructor waits for the job in flight.
#include "engine/io/background_writer.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

TEST_CASE("BackgroundWriter runs jobs off the caller's thread, one at a time, in order, and returns their errors") {
  using namespace std::chrono_literals;
  engine::BackgroundWriter writer;
  std::vector<int> done;
  std::atomic<int> running{0}, most{0};
  const auto caller = std::this_thread::get_id();
  bool off_thread = true;
  for (int i = 0; i < 4; ++i)
    writer.submit([&, i] {
      most = std::max(most.load(), ++running);
      off_thread = off_thread && std::this_thread::get_id() != caller;
      std::this_thread::sleep_for(5ms);
      done.push_back(i);
      --running;
    });
  writer.wait();
  CHECK(done == std::vector<int>{0, 1, 2, 3});
  CHECK(most.load() == 1);
  CHECK(off_thread);

  // The caller goes on while a job runs.
  std::atomic<bool> release{false};
  writer.submit([&] {
    while (!release) std::this_thread::sleep_for(1ms);
  });
  release = true;
  writer.wait();

  // A failed job (a full disk) is reported by the next call, once.
  writer.submit([] { throw std::runtime_error("disk full"); });
  CHECK_THROWS_WITH(writer.submit([] {}), "disk full");
  CHECK_NOTHROW(writer.wait());  // the job after it ran and succeeded
  writer.submit([] { throw std::runtime_error("again"); });
  CHECK_THROWS_WITH(writer.wait(), "again");
  CHECK_NOTHROW(writer.wait());

  // The destructor waits for the job in flight.
  std::atomic<bool> finished{false};
  {
    engine::BackgroundWriter w;
    w.submit([&] {
      std::this_thread::sleep_for(20ms);
      finished = true;
    });
  }
  CHECK(finished);
}
