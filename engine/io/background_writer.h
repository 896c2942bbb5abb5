#pragma once
// One write job at a time off the calling thread: a resume checkpoint's checksum, write and fsync
// (tens of milliseconds to seconds on a slow disk) run while training goes on. The caller hands
// over data it no longer changes (a snapshot). A job's error is thrown by the next submit() or
// wait(): a failed write is never silent, only reported at the next checkpoint or at the end.
#include <functional>
#include <future>

namespace engine {

class BackgroundWriter {
 public:
  BackgroundWriter() = default;
  BackgroundWriter(const BackgroundWriter&) = delete;
  BackgroundWriter& operator=(const BackgroundWriter&) = delete;
  /// Waits for the job in flight (a process leaving by an exception still finishes its file); its
  /// error, if any, is dropped: the exception already leaving says what went wrong first.
  ~BackgroundWriter();
  /// Waits for the previous job (throwing its error), then starts `job` on its own thread.
  void submit(std::function<void()> job);
  /// Waits for the job in flight, if any; throws its error.
  void wait();

 private:
  std::future<void> pending_;
};

}  // namespace engine
