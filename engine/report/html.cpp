#include "engine/report/html.h"

#include <cmath>
#include <cstdio>

namespace engine::report {

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string base64(std::string_view bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16 |
                       static_cast<unsigned char>(bytes[i + 1]) << 8 |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += table[v >> 18 & 63];
    out += table[v >> 12 & 63];
    out += table[v >> 6 & 63];
    out += table[v & 63];
  }
  if (i < bytes.size()) {
    unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += table[v >> 18 & 63];
    out += table[v >> 12 & 63];
    out += i + 1 < bytes.size() ? table[v >> 6 & 63] : '=';
    out += '=';
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  const double a = std::fabs(v);
  if (v == std::round(v) && a < 1e9)
    std::snprintf(buf, sizeof buf, "%.0f", v);  // counts, epochs, steps
  else if (a != 0 && (a < 1e-3 || a >= 1e6))
    std::snprintf(buf, sizeof buf, "%.3g", v);  // learning rates, tiny losses
  else if (a < 1)
    std::snprintf(buf, sizeof buf, "%.4f", v);  // accuracies: four places tell 0.9460 from 0.9463
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[48];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%d min %02d s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%d h %02d min", static_cast<int>(s / 3600),
                  static_cast<int>(s / 60) % 60);
  return buf;
}

}  // namespace engine::report
