#include "engine/core/sample_draws.h"

#include "engine/core/rng.h"

namespace engine {

namespace {
thread_local SampleDrawScope::State* current_draw_scope = nullptr;
}  // namespace

uint64_t SampleDrawSite::sample_key(int64_t j) const {
  return Rng::mix(key, static_cast<uint64_t>(first + j * stride), 0x5D1A7E);
}

SampleDrawScope::SampleDrawScope(uint64_t key, int64_t first, int64_t stride)
    : state_{key, first, stride, 0}, outer_(current_draw_scope) {
  current_draw_scope = &state_;
}

SampleDrawScope::~SampleDrawScope() { current_draw_scope = outer_; }

std::optional<SampleDrawSite> next_sample_draw_site() {
  SampleDrawScope::State* s = current_draw_scope;
  if (!s) return std::nullopt;
  const uint64_t site = s->next_site++;
  return SampleDrawSite{Rng::mix(s->key, site, 0x517E), s->first, s->stride};
}

double sample_uniform(uint64_t sample_key, uint64_t i) {
  return static_cast<double>(Rng::mix(sample_key, i) >> 11) * 0x1.0p-53;
}

}  // namespace engine
