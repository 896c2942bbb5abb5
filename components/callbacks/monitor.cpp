#include "components/callbacks/monitor.h"

#include <cmath>

namespace engine {

Monitor Monitor::read(Options& o, const std::string& default_key) {
  Monitor m;
  m.key = o.text("monitor", default_key, "value watched: train/loss, valid/loss, valid/<metric>, valid_ema/* (checked by engine check)");
  m.mode = o.choice("mode", m.mode, {"auto", "max", "min"}, "direction of improvement; auto: min for *loss/*error*, else max");
  return m;
}

bool Monitor::maximize() const {
  if (mode != "auto") return mode == "max";
  return key.find("loss") == std::string::npos && key.find("error") == std::string::npos;
}

bool Monitor::improved(double value, double best, double min_delta) const {
  if (std::isnan(value)) return false;
  if (std::isnan(best)) return true;
  return maximize() ? value > best + min_delta : value < best - min_delta;
}

}  // namespace engine
