#include "engine/trainer/train_state.h"

#include <sstream>

#include "engine/core/text.h"

namespace engine {

std::map<std::string, std::string> TrainState::to_metadata() const {
  return {{"epoch", std::to_string(epoch)},
          {"step", std::to_string(step)},
          {"skipped_steps", std::to_string(skipped_steps)},
          {"images_seen", std::to_string(images_seen)},
          {"best_epoch", std::to_string(best_epoch)},
          {"best_value", exact_number(best_value)},
          {"stop", stop ? "1" : "0"},
          {"batches_done", std::to_string(batches_done)},
          {"phase_first_step", std::to_string(phase_first_step)}};
}

TrainState TrainState::from_metadata(const std::map<std::string, std::string>& m) {
  TrainState s;
  auto get = [&](const char* k) -> const std::string* {
    auto it = m.find(k);
    return it == m.end() ? nullptr : &it->second;
  };
  if (auto v = get("epoch")) s.epoch = std::stoll(*v);
  if (auto v = get("step")) s.step = std::stoll(*v);
  if (auto v = get("skipped_steps")) s.skipped_steps = std::stoll(*v);
  if (auto v = get("images_seen")) s.images_seen = std::stoll(*v);
  if (auto v = get("best_epoch")) s.best_epoch = std::stoll(*v);
  if (auto v = get("best_value")) s.best_value = std::stod(*v);
  if (auto v = get("stop")) s.stop = *v == "1";
  if (auto v = get("batches_done")) s.batches_done = std::stoll(*v);
  if (auto v = get("phase_first_step")) s.phase_first_step = std::stoll(*v);
  return s;
}

}  // namespace engine
