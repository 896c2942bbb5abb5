#include "engine/report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/report/html.h"

namespace engine::report {

namespace {

constexpr double kWidth = 520, kHeight = 290, kLeft = 60, kRight = 14, kTop = 16, kBottom = 42;
constexpr size_t kMaxMarkers = 150;  // beyond this, dots hide the line and bloat the file

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v) {
  if (v == 0) return "0";
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 1e5 || a < 1e-4)
    std::snprintf(buf, sizeof buf, "%.0e", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

const char* dash_array(int dash) {
  switch (dash % 4) {
    case 1:
      return "7 4";
    case 2:
      return "2 3";
    case 3:
      return "8 3 2 3";
    default:
      return "";
  }
}

// Ticks at 1, 2 or 5 x 10^k, about `target` of them between lo and hi.
std::vector<double> linear_ticks(double lo, double hi, int target, bool integer) {
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer) step = std::max(1.0, std::round(step));
  std::vector<double> ticks;
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9 && ticks.size() < 50; v += step)
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return ticks;
}

struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  double pixel_lo = 0, pixel_hi = 1;  // where lo and hi land
  double map(double v) const {
    const double a = log ? std::log10(lo) : lo, b = log ? std::log10(hi) : hi;
    const double t = ((log ? std::log10(v) : v) - a) / (b - a);
    return pixel_lo + t * (pixel_hi - pixel_lo);
  }
};

}  // namespace

std::string palette(int index) {
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return colors[((index % 10) + 10) % 10];
}

std::string render_chart(const Chart& chart) {
  double xlo = std::numeric_limits<double>::infinity(), xhi = -xlo, ylo = xlo, yhi = -xlo;
  bool all_positive = true;
  size_t finite_points = 0, non_finite = 0;
  for (const auto& s : chart.series)
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i])) continue;
      xlo = std::min(xlo, s.x[i]);
      xhi = std::max(xhi, s.x[i]);
      if (!std::isfinite(s.y[i])) {
        ++non_finite;
        continue;
      }
      ++finite_points;
      ylo = std::min(ylo, s.y[i]);
      yhi = std::max(yhi, s.y[i]);
      all_positive = all_positive && s.y[i] > 0;
    }
  const bool empty = finite_points == 0;
  if (!std::isfinite(xlo)) xlo = 0, xhi = 1;
  if (xlo == xhi) {  // one epoch: centre the point
    const double pad = chart.integer_x ? 1.0 : std::max(std::fabs(xlo) * 0.1, 0.5);
    xlo -= pad;
    xhi += pad;
  }
  if (!std::isfinite(ylo)) ylo = 0, yhi = 1;
  Axis x{xlo, xhi, false, kLeft, kWidth - kRight};
  Axis y;
  y.pixel_lo = kHeight - kBottom;
  y.pixel_hi = kTop;
  // Log scale only when a few values dwarf the rest (an exploding loss): the median, not the
  // minimum, is the reference, so a schedule annealing towards 0 stays on a linear axis.
  std::vector<double> finite_y;
  for (const auto& s : chart.series)
    for (double v : s.y)
      if (std::isfinite(v)) finite_y.push_back(v);
  double median = 0;
  if (!finite_y.empty()) {
    std::nth_element(finite_y.begin(), finite_y.begin() + static_cast<std::ptrdiff_t>(finite_y.size() / 2),
                     finite_y.end());
    median = finite_y[finite_y.size() / 2];
  }
  y.log = all_positive && !empty && yhi / median > 1e3;
  if (y.log) {
    y.lo = std::pow(10.0, std::floor(std::log10(ylo)));
    y.hi = std::pow(10.0, std::ceil(std::log10(yhi)));
  } else if (ylo == yhi) {
    const double pad = ylo != 0 ? std::fabs(ylo) * 0.1 : 1.0;
    y.lo = ylo - pad;
    y.hi = yhi + pad;
  } else {
    const double pad = (yhi - ylo) * 0.06;
    y.lo = ylo - pad;
    y.hi = yhi + pad;
  }

  std::string svg = "<figure class=\"chart-box\"><figcaption>" + html_escape(chart.title) + "</figcaption>";
  svg += "<svg class=\"chart\" id=\"" + html_escape(chart.id) + "\" viewBox=\"0 0 " + num(kWidth) + " " +
         num(kHeight) + "\" role=\"img\" aria-label=\"" + html_escape(chart.title) +
         "\" xmlns=\"http://www.w3.org/2000/svg\">";
  svg += "<rect class=\"plot\" x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" +
         num(kWidth - kLeft - kRight) + "\" height=\"" + num(kHeight - kTop - kBottom) + "\"/>";

  // Grid and tick labels.
  for (double t : linear_ticks(x.lo, x.hi, 6, chart.integer_x)) {
    const std::string px = num(x.map(t));
    svg += "<line class=\"grid\" x1=\"" + px + "\" x2=\"" + px + "\" y1=\"" + num(kTop) + "\" y2=\"" +
           num(kHeight - kBottom) + "\"/>";
    svg += "<text class=\"tick\" x=\"" + px + "\" y=\"" + num(kHeight - kBottom + 14) +
           "\" text-anchor=\"middle\">" + tick_label(t) + "</text>";
  }
  std::vector<double> yticks;
  if (y.log) {
    for (double e = std::log10(y.lo); e <= std::log10(y.hi) + 1e-9; ++e) yticks.push_back(std::pow(10.0, e));
  } else {
    yticks = linear_ticks(y.lo, y.hi, 5, false);
  }
  for (double t : yticks) {
    const std::string py = num(y.map(t));
    svg += "<line class=\"grid\" x1=\"" + num(kLeft) + "\" x2=\"" + num(kWidth - kRight) + "\" y1=\"" + py +
           "\" y2=\"" + py + "\"/>";
    svg += "<text class=\"tick\" x=\"" + num(kLeft - 6) + "\" y=\"" + num(y.map(t) + 4) +
           "\" text-anchor=\"end\">" + tick_label(t) + "</text>";
  }
  svg += "<text class=\"axis-label\" x=\"" + num((kLeft + kWidth - kRight) / 2) + "\" y=\"" +
         num(kHeight - 6) + "\" text-anchor=\"middle\">" + html_escape(chart.x_label) + "</text>";
  svg += "<text class=\"axis-label\" transform=\"translate(14," + num((kTop + kHeight - kBottom) / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" +
         html_escape(chart.y_label + (y.log ? " (log scale)" : "")) + "</text>";

  // Lines, broken at non-finite values; dots with tooltips; red x where a value is NaN/inf.
  for (const auto& s : chart.series) {
    const std::string color = palette(s.color);
    std::string path;
    bool pen_down = false;
    size_t finite_in_series = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
        pen_down = false;
        continue;
      }
      ++finite_in_series;
      path += (pen_down ? "L" : "M") + num(x.map(s.x[i])) + " " + num(y.map(s.y[i]));
      pen_down = true;
    }
    if (!path.empty()) {
      svg += "<path class=\"series\" d=\"" + path + "\" stroke=\"" + color + "\"";
      if (s.dash % 4) svg += std::string(" stroke-dasharray=\"") + dash_array(s.dash) + "\"";
      svg += "/>";
    }
    const bool markers = finite_in_series <= kMaxMarkers;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i])) continue;
      const std::string tip = "<title>" + html_escape(s.label) + " at " + html_escape(chart.x_label) + " " +
                              format_value(s.x[i]) + ": " + format_value(s.y[i]) + "</title>";
      if (!std::isfinite(s.y[i])) {
        const double px = x.map(s.x[i]), py = kTop + 6;
        svg += "<g class=\"non-finite\"><path d=\"M" + num(px - 4) + " " + num(py - 4) + "L" + num(px + 4) +
               " " + num(py + 4) + "M" + num(px - 4) + " " + num(py + 4) + "L" + num(px + 4) + " " +
               num(py - 4) + "\"/>" + tip + "</g>";
      } else if (markers) {
        svg += "<circle cx=\"" + num(x.map(s.x[i])) + "\" cy=\"" + num(y.map(s.y[i])) + "\" r=\"" +
               (finite_in_series == 1 ? "4" : "2.5") + "\" fill=\"" + color + "\">" + tip + "</circle>";
      }
    }
  }
  if (empty)
    svg += "<text class=\"no-data\" x=\"" + num((kLeft + kWidth - kRight) / 2) + "\" y=\"" +
           num((kTop + kHeight - kBottom) / 2) + "\" text-anchor=\"middle\">" +
           (non_finite ? "only non-finite values" : "no data yet") + "</text>";
  svg += "</svg><div class=\"legend\">";
  for (const auto& s : chart.series) {
    svg +=
        "<span><svg width=\"26\" height=\"10\" aria-hidden=\"true\"><line x1=\"1\" y1=\"5\" x2=\"25\" "
        "y2=\"5\" stroke=\"" +
        palette(s.color) + "\" stroke-width=\"2.5\"";
    if (s.dash % 4) svg += std::string(" stroke-dasharray=\"") + dash_array(s.dash) + "\"";
    svg += "/></svg>" + html_escape(s.label) + "</span>";
  }
  if (non_finite) svg += "<span class=\"warn\">x = NaN/inf (" + std::to_string(non_finite) + ")</span>";
  svg += "</div></figure>";
  return svg;
}

}  // namespace engine::report
