// Per-sample draws that do not depend on the layout (engine/core/sample_draws.h).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/sample_draws.h"

using namespace engine;

namespace {

// The first draw of local sample j at each of `sites` sites, inside a scope for (rank, world).
std::vector<std::vector<double>> draws_of(uint64_t key, int64_t rank, int64_t world, int64_t n, int sites) {
  SampleDrawScope scope(key, rank, world);
  std::vector<std::vector<double>> out;
  for (int s = 0; s < sites; ++s) {
    auto site = next_sample_draw_site();
    REQUIRE(site.has_value());
    std::vector<double> row;
    for (int64_t j = 0; j < n; ++j) row.push_back(sample_uniform(site->sample_key(j), 0));
    out.push_back(row);
  }
  return out;
}

}  // namespace

TEST_CASE("sample draws: a sample's draws are the same on 1 rank or N, site by site") {
  const auto one = draws_of(7, 0, 1, 12, 3);  // 1 rank x 12
  for (int64_t world : {2, 3, 4}) {
    for (int64_t rank = 0; rank < world; ++rank) {
      const auto part = draws_of(7, rank, world, 12 / world, 3);  // rank r holds positions r, r+world, ...
      for (int s = 0; s < 3; ++s)
        for (int64_t j = 0; j < 12 / world; ++j) CHECK(part[s][j] == one[s][rank + j * world]);
    }
  }
  // Different sites, samples and keys draw differently.
  CHECK(one[0][0] != one[1][0]);
  CHECK(one[0][0] != one[0][1]);
  CHECK(draws_of(8, 0, 1, 1, 1)[0][0] != one[0][0]);
}

TEST_CASE("sample draws: sites restart in each scope, the innermost scope wins, none outside") {
  CHECK(!next_sample_draw_site().has_value());
  {
    SampleDrawScope outer(1, 0, 1);
    const uint64_t first = next_sample_draw_site()->sample_key(0);
    const uint64_t second = next_sample_draw_site()->sample_key(0);
    CHECK(first != second);
    {
      SampleDrawScope inner(1, 0, 1);
      CHECK(next_sample_draw_site()->sample_key(0) == first);  // a new scope starts at site 0
    }
    CHECK(next_sample_draw_site()->sample_key(0) != first);  // the outer scope goes on at site 2
    CHECK(next_sample_draw_site()->first == 0);
  }
  CHECK(!next_sample_draw_site().has_value());
}

TEST_CASE("sample draws: uniform below 1, mean 1/2, no visible correlation between neighbours") {
  SampleDrawScope scope(42, 0, 1);
  const SampleDrawSite site = *next_sample_draw_site();
  const int n = 200000;
  double sum = 0, lo = 1, hi = 0, lag = 0, prev = 0;
  for (int j = 0; j < n; ++j) {
    const double u = sample_uniform(site.sample_key(j / 4), static_cast<uint64_t>(j % 4));
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    if (j) lag += (u - 0.5) * (prev - 0.5);
    prev = u;
  }
  CHECK(lo >= 0.0);
  CHECK(hi < 1.0);
  // Mean of n uniforms: sd 0.289 / sqrt(n) = 6.5e-4; lag-1 covariance: sd 1/12 / sqrt(n) = 1.9e-4.
  CHECK(std::abs(sum / n - 0.5) < 4e-3);
  CHECK(std::abs(lag / n) < 1.5e-3);
}
