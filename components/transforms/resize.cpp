#include "components/transforms/resize.h"

#include <stdexcept>

#include "components/transforms/interpolation.h"

namespace engine {

ResizeOptions ResizeOptions::read(Options& o) {
  ResizeOptions d;
  std::vector<int64_t> size = o.integers("size", {0, 0}, "target [height, width] in pixels (required)");
  d.interpolation =
      o.choice("interpolation", d.interpolation, interpolation_names(), "resampling filter (OpenCV INTER_*)");
  d.p = o.number("p", d.p, "probability of applying", 0.0, 1.0);
  if (o.describing()) return d;
  // [0, 0] is the "not given" default: a resize without a size is always a recipe mistake.
  if (size.size() != 2) {
    o.error("size", "expected 2 values [height, width], got " + std::to_string(size.size()),
            "e.g. size = [56, 56]");
  } else if (!o.has("size")) {
    o.error("size", "required", "set size = [height, width], e.g. size = [56, 56]");
  } else if (size[0] <= 0 || size[1] <= 0 || size[0] > 1 << 16 || size[1] > 1 << 16) {
    o.error("size", "values must be in 1..65536, got [" + std::to_string(size[0]) + ", " +
                        std::to_string(size[1]) + "]");
  } else {
    d.height = static_cast<int>(size[0]);
    d.width = static_cast<int>(size[1]);
  }
  return d;
}

Resize::Resize(ResizeOptions opts) : opts_(std::move(opts)), flag_(interpolation_flag(opts_.interpolation)) {
  // Programs (not recipes) build Resize directly; a zero size would only fail deep inside OpenCV.
  if (opts_.height <= 0 || opts_.width <= 0)
    throw std::invalid_argument("Resize: height and width must be > 0");
}

void Resize::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) return;
  if (image.rows == opts_.height && image.cols == opts_.width) return;  // albumentations: unchanged
  cv::Mat out;
  cv::resize(image, out, cv::Size(opts_.width, opts_.height), 0, 0, flag_);
  image = out;
}

void register_resize(TransformRegistry& registry) {
  registry.add("resize", "resize to size = [h, w] with the chosen interpolation (albumentations Resize)",
               [](Options& o) -> TransformRegistry::Factory {
                 auto opts = ResizeOptions::read(o);
                 return [opts] { return std::make_unique<Resize>(opts); };
               });
}

}  // namespace engine
