#pragma once
// Line charts as inline SVG: no script, no library, readable in any browser and in a screenshot.
// Non-finite values (a diverged loss) break the line and are marked with a red x at the top edge,
// with a tooltip saying where; a one-point series shows as a dot; y switches to a log scale when
// the largest positive value is over 1000 times the median (an exploding loss).
#include <string>
#include <vector>

namespace engine::report {

struct Series {
  std::string label;
  std::vector<double> x, y;  // same length; y may hold NaN/inf
  int color = 0;             // palette index (runs, or roles within one run)
  int dash = 0;              // 0 solid, 1 dashed, 2 dotted, 3 dash-dot
};

struct Chart {
  std::string id;  // DOM id of the <svg>: links and tests find a chart by it
  std::string title, x_label, y_label;
  bool integer_x = false;  // epochs: ticks on whole numbers only
  std::vector<Series> series;
};

/// "#1f77b4"...: the palette entry `index` (wraps around).
std::string palette(int index);

/// A <figure class="chart-box"> holding the title, an <svg class="chart" id="..."> and an HTML
/// legend. With no finite point at all it still renders the frame and says "no data".
std::string render_chart(const Chart& chart);

}  // namespace engine::report
