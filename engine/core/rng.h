#pragma once
// Deterministic randomness. Every random decision in the data path draws from an Rng derived from
// (seed, epoch, sample index), so results do not depend on worker count or thread timing.
#include <cstdint>
#include <random>

namespace engine {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  /// Mixes several integers into one well-spread 64-bit seed (splitmix64 steps).
  static uint64_t mix(uint64_t a, uint64_t b = 0, uint64_t c = 0);

  /// Uniform in [lo, hi).
  double uniform(double lo = 0.0, double hi = 1.0) {
    return lo + (hi - lo) * std::uniform_real_distribution<double>(0.0, 1.0)(gen_);
  }
  /// Uniform integer in [lo, hi].
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  /// albumentations' rule: a transform with probability p fires if p >= 1 or uniform() < p.
  bool fires(double p) { return p >= 1.0 || uniform() < p; }
  std::mt19937_64& engine() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

inline uint64_t Rng::mix(uint64_t a, uint64_t b, uint64_t c) {
  auto step = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return step(step(step(a) ^ b) ^ c);
}

}  // namespace engine
