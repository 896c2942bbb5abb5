#pragma once
// resize: albumentations Resize(height, width, interpolation, p=1). An image already of the target
// size is returned unchanged (same pixels, no resampling); otherwise cv::resize with the chosen
// interpolation. lanczos4 is cv::INTER_LANCZOS4: 8x8 taps, edges replicated, no anti-aliasing
// when downscaling (use area for strong downscales). Any dtype and channel count; dtype kept.
#include <string>

#include "components/transforms/transform.h"

namespace engine {

struct ResizeOptions {
  int height = 0;                        // target rows, > 0 (required: size = [h, w])
  int width = 0;                         // target columns, > 0
  std::string interpolation = "linear";  // nearest | linear | cubic | area | lanczos4
  double p = 1.0;                        // probability of applying

  /// Reads `size = [h, w]` (required, both > 0), `interpolation` and `p`.
  static ResizeOptions read(Options& o);
};

class Resize : public Transform {
 public:
  explicit Resize(ResizeOptions opts);
  void apply(cv::Mat& image, Rng& rng) const override;
  bool random() const override { return opts_.p < 1.0; }
  const ResizeOptions& options() const { return opts_; }

 private:
  ResizeOptions opts_;
  int flag_;  // cv::INTER_* for opts_.interpolation
};

void register_resize(TransformRegistry& registry);

}  // namespace engine
