#pragma once
// Contract of every transform (albumentations semantics, see shared/reference/albumentations.md):
// - apply() changes one image in place. Images are cv::Mat, HxW (CV_8UC1/CV_32FC1) or HxWxC.
// - Value ranges are explicit: CV_8U means 0..255; CV_32F is whatever the previous step produced
//   (raw 0..255 floats from a dataset, or normalised values after `normalize`). A transform that
//   needs a range (e.g. brightness clipping) says so in its doc and never silently changes scale.
// - All randomness comes from `rng` (seeded per sample from (seed, epoch, index)): a transform
//   holds no mutable state and may run on many loader threads at once.
// - A transform with probability p fires iff rng.fires(p) (p >= 1 or uniform() < p).
// - random() says whether the output may depend on `rng`; a pipeline of transforms that are not
//   random gives every pass the same image, which the loader may then keep (LoaderOptions::cache_bytes).
#include <opencv2/core.hpp>

#include "engine/core/rng.h"
#include "engine/registry/registry.h"

namespace engine {

class Transform {
 public:
  virtual ~Transform() = default;
  virtual void apply(cv::Mat& image, Rng& rng) const = 0;
  /// True when apply() may draw from rng (the default); false for a transform that always fires
  /// and draws nothing.
  virtual bool random() const { return true; }
};

using TransformRegistry = Registry<Transform>;

/// Registers every transform of components/transforms/ (one register_* per component file).
void register_transforms(TransformRegistry& registry);

}  // namespace engine
