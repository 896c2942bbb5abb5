#pragma once
// Random draws per training sample that do not depend on the process layout.
//
// Stochastic layers (drop_path, dropout) draw for each sample of a batch. With torch's generator
// each rank would draw its own stream, so 2 ranks x 32 and 1 rank x 64 would drop different
// residual branches of the same samples and the layout would change the results. Inside a
// SampleDrawScope a layer instead asks for a draw site and derives the draws of local sample j
// from (the scope's key, the site's number, the sample's position in the global batch): the same
// sample gets the same draws whatever the number of ranks, on any rank, and after a resume.
//
// The trainer opens one scope per training micro-batch, keyed by (seed, epoch, micro-batch);
// the sampler says which global positions the local batch holds (sampler.h). Outside a scope
// (a model called directly) the key comes from torch's generator, as torch::manual_seed sets it.
#include <cstdint>
#include <optional>

namespace engine {

/// The draws of one site (one stochastic layer call) of the current micro-batch: local sample j
/// is global position first + j * stride, and its draws come from sample_key(key, first + j * stride).
struct SampleDrawSite {
  uint64_t key = 0;
  int64_t first = 0;
  int64_t stride = 1;
  /// The key of local sample j's draws at this site.
  uint64_t sample_key(int64_t j) const;
};

/// Scopes the per-sample draws of the stochastic layers run on this thread (RAII, nestable: the
/// innermost wins). Site numbers restart at 0 in each scope, so the layers of a forward pass get
/// sites 0, 1, 2, ... in call order, the same on every rank.
class SampleDrawScope {
 public:
  SampleDrawScope(uint64_t key, int64_t first, int64_t stride);
  ~SampleDrawScope();
  SampleDrawScope(const SampleDrawScope&) = delete;
  SampleDrawScope& operator=(const SampleDrawScope&) = delete;

  struct State {  // the scope's key, mapping and next site number (sample_draws.cpp)
    uint64_t key;
    int64_t first, stride;
    uint64_t next_site;
  };

 private:
  State state_;
  State* outer_;
};

/// The next draw site of the innermost scope on this thread, or nullopt outside any scope.
std::optional<SampleDrawSite> next_sample_draw_site();

/// The i-th uniform double in [0, 1) of a sample's draws (53 random bits of a splitmix64 mix).
double sample_uniform(uint64_t sample_key, uint64_t i);

}  // namespace engine
