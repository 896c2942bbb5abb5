#include "components/transforms/normalize.h"

#include <limits>
#include <sstream>
#include <string>

#include "engine/core/errors.h"

namespace engine {

namespace {

std::string list_text(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

}  // namespace

NormalizeOptions NormalizeOptions::read(Options& o) {
  NormalizeOptions d;
  d.mean =
      o.numbers("mean", d.mean, "per-channel mean in units of max_pixel_value (1 value or one per channel)");
  d.std = o.numbers("std", d.std, "per-channel standard deviation, > 0 (1 value or one per channel)");
  d.max_pixel_value = o.number("max_pixel_value", d.max_pixel_value,
                               "input value that stands for 1.0 (255 for 0..255 images, 1 for 0..1 floats)",
                               std::numeric_limits<double>::min());
  d.p = o.number("p", d.p, "probability of applying", 0.0, 1.0);
  if (o.describing()) return d;
  if (d.mean.empty()) o.error("mean", "must not be empty", "e.g. mean = [0.1310] for MNIST");
  if (d.std.empty()) o.error("std", "must not be empty", "e.g. std = [0.30854] for MNIST");
  for (double s : d.std)
    if (!(s > 0)) {
      o.error("std", "every value must be > 0, got " + list_text(d.std));
      break;
    }
  if (d.mean.size() > 1 && d.std.size() > 1 && d.mean.size() != d.std.size())
    o.error("std", std::to_string(d.std.size()) + " values but mean has " + std::to_string(d.mean.size()),
            "give one value per channel in both, or a single value");
  return d;
}

void Normalize::apply(cv::Mat& image, Rng& rng) const {
  if (!rng.fires(opts_.p)) return;
  const int channels = image.channels();
  for (const auto* v : {&opts_.mean, &opts_.std})
    if (v->size() != 1 && static_cast<int>(v->size()) != channels)
      throw UserError("normalize: " + std::string(v == &opts_.mean ? "mean" : "std") + " has " +
                      std::to_string(v->size()) + " values but the image has " + std::to_string(channels) +
                      " channel(s) (expected 1 value or " + std::to_string(channels) + ")");
  // Per channel: out = x * scale + shift with scale = 1/(std*max), shift = -mean/std. Computed in
  // double once, applied in float, like albumentations (img - mean*max) * (1/(std*max)).
  std::vector<float> scale(channels), shift(channels);
  for (int c = 0; c < channels; ++c) {
    double m = opts_.mean.size() == 1 ? opts_.mean[0] : opts_.mean[c];
    double s = opts_.std.size() == 1 ? opts_.std[0] : opts_.std[c];
    double denom = 1.0 / (s * opts_.max_pixel_value);
    scale[c] = static_cast<float>(denom);
    shift[c] = static_cast<float>(-m * opts_.max_pixel_value * denom);
  }
  cv::Mat out;
  image.convertTo(out, CV_MAKETYPE(CV_32F, channels));  // a new buffer: the input is never written
  // A plain loop over interleaved values handles any channel count (cv::Scalar stops at 4).
  for (int y = 0; y < out.rows; ++y) {
    float* row = out.ptr<float>(y);
    for (int i = 0, n = out.cols * channels; i < n; ++i) {
      int c = i % channels;
      row[i] = row[i] * scale[c] + shift[c];
    }
  }
  image = out;
}

void register_normalize(TransformRegistry& registry) {
  registry.add("normalize",
               "(img - mean*max_pixel_value) / (std*max_pixel_value) as float32 (albumentations Normalize)",
               [](Options& o) -> TransformRegistry::Factory {
                 auto opts = NormalizeOptions::read(o);
                 return [opts] { return std::make_unique<Normalize>(opts); };
               });
}

}  // namespace engine
