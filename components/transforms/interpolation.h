#pragma once
// The interpolation names recipes use (resize, shift_scale_rotate), mapped to OpenCV flags.
// Shared so that every geometric transform accepts exactly the same spelling.
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

namespace engine {

/// "nearest" | "linear" | "cubic" | "area" | "lanczos4", in the order `engine list` shows them.
inline const std::vector<std::string>& interpolation_names() {
  static const std::vector<std::string> names = {"nearest", "linear", "cubic", "area", "lanczos4"};
  return names;
}

/// cv::INTER_* for one of interpolation_names(); an unknown name (already rejected by the
/// options reader) falls back to linear.
inline int interpolation_flag(const std::string& name) {
  if (name == "nearest") return cv::INTER_NEAREST;
  if (name == "cubic") return cv::INTER_CUBIC;
  if (name == "area") return cv::INTER_AREA;
  if (name == "lanczos4") return cv::INTER_LANCZOS4;
  return cv::INTER_LINEAR;
}

}  // namespace engine
