#include "components/transforms/horizontal_flip.h"

namespace engine {

HorizontalFlipOptions HorizontalFlipOptions::read(Options& o) {
  HorizontalFlipOptions d;
  d.p = o.number("p", d.p, "probability of flipping", 0.0, 1.0);
  return d;
}

void HorizontalFlip::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) return;
  // Into a new buffer, never in place: the caller's Mat may share its pixels with another header
  // (a dataset view, a cached sample), and a transform must not change data it does not own.
  cv::Mat out;
  cv::flip(image, out, 1);
  image = out;
}

void register_horizontal_flip(TransformRegistry& registry) {
  registry.add(
      "horizontal_flip",
      "mirror the image horizontally (left-right) with probability p (albumentations HorizontalFlip)",
      [](Options& o) -> TransformRegistry::Factory {
        auto opts = HorizontalFlipOptions::read(o);
        return [opts] { return std::make_unique<HorizontalFlip>(opts); };
      });
}

}  // namespace engine
