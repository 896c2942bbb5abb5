#include "components/transforms/vertical_flip.h"

namespace engine {

VerticalFlipOptions VerticalFlipOptions::read(Options& o) {
  VerticalFlipOptions d;
  d.p = o.number("p", d.p, "probability of flipping", 0.0, 1.0);
  return d;
}

void VerticalFlip::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) return;
  // Into a new buffer, never in place: the caller's Mat may share its pixels with another header
  // (a dataset view, a cached sample), and a transform must not change data it does not own.
  cv::Mat out;
  cv::flip(image, out, 0);
  image = out;
}

void register_vertical_flip(TransformRegistry& registry) {
  registry.add("vertical_flip",
               "mirror the image vertically (top-bottom) with probability p (albumentations VerticalFlip)",
               [](Options& o) -> TransformRegistry::Factory {
                 auto opts = VerticalFlipOptions::read(o);
                 return [opts] { return std::make_unique<VerticalFlip>(opts); };
               });
}

}  // namespace engine
