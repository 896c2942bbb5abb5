#pragma once
// progress_bar: the console, like tqdm. Progress goes to stderr; the metrics table (one row per
// epoch) goes to stdout, so `engine run ... > log` keeps the table and a terminal still shows the
// bar. On a terminal the bar is one line redrawn in place ('\r'), its filled part in colour. When
// stderr is not a terminal (CI logs, pipes) or TERM=dumb, nothing is redrawn: a plain line every
// `plain_every_s` seconds and one at the end of each epoch. NO_COLOR (any non-empty value,
// https://no-color.org) turns off every ANSI escape. Main process only.
#include "components/callbacks/callback.h"

namespace engine {

struct ProgressBarOptions {
  double refresh_s = 0.25;   // terminal redraw interval
  double plain_every_s = 15; // interval of plain progress lines when not redrawing (0 = only at epoch ends)
  int64_t width = 24;
  static ProgressBarOptions read(Options& o);
};

/// How the bar may write to stderr, from the stream and the environment.
struct ConsoleStyle {
  bool redraw = false;  // a terminal, not TERM=dumb: '\r' redraws one line in place
  bool colour = false;  // redraw, and NO_COLOR unset or empty: ANSI escapes allowed
  /// isatty(stderr), $TERM and $NO_COLOR of this process.
  static ConsoleStyle detect();
};

void register_progress_bar(CallbackRegistry& registry);

}  // namespace engine
