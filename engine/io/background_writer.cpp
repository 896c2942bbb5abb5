#include "engine/io/background_writer.h"

#include <utility>

namespace engine {

BackgroundWriter::~BackgroundWriter() {
  if (!pending_.valid()) return;
  try {
    pending_.get();
  } catch (...) {  // a destructor must not throw; see the header
  }
}

void BackgroundWriter::submit(std::function<void()> job) {
  wait();
  pending_ = std::async(std::launch::async, std::move(job));
}

void BackgroundWriter::wait() {
  if (pending_.valid()) pending_.get();  // get() leaves it invalid, and rethrows the job's exception
}

}  // namespace engine
