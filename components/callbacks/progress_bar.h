#pragma once
// progress_bar: the console. One bar per epoch (batches, ETA, img/s, running loss) redrawn in
// place on a terminal, plain lines every few seconds when stdout is not a terminal (CI logs), and
// one row per epoch of the metrics table. Main process only.
#include "components/callbacks/callback.h"

namespace engine {

struct ProgressBarOptions {
  double refresh_s = 0.25;   // terminal redraw interval
  double plain_every_s = 15; // interval of plain progress lines when not a terminal (0 = none)
  int64_t width = 24;
  static ProgressBarOptions read(Options& o);
};

void register_progress_bar(CallbackRegistry& registry);

}  // namespace engine
