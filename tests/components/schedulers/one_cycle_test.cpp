#include "components/schedulers/one_cycle.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "components/schedulers/all.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {

// fastai, verbatim: SchedCos(start, end)(pos) = start + (1 + cos(pi * (1 - pos))) * (end - start) / 2
double fastai_cos(double start, double end, double pos) {
  return start + (1 + std::cos(M_PI * (1 - pos))) * (end - start) / 2;
}
}  // namespace

TEST_CASE("one_cycle: lr_max/div at step 0, lr_max at pct_start, ~lr_max/div_final at the end") {
  OneCycleScheduler s{OneCycleOptions{}};
  const int64_t total = 200;
  const double lr_max = 2e-3;
  CHECK(s.lr(0, total, lr_max) == doctest::Approx(lr_max / 25).epsilon(1e-12));
  CHECK(s.lr(50, total, lr_max) == doctest::Approx(lr_max).epsilon(1e-12));  // pos = 0.25
  double last = s.lr(total - 1, total, lr_max);
  // pos = 199/200 never reaches 1, as in fastai: just above lr_max / 1e5.
  CHECK(last == doctest::Approx(fastai_cos(lr_max, lr_max / 1e5, (0.995 - 0.25) / 0.75)).epsilon(1e-12));
  CHECK(last > lr_max / 1e5);
  CHECK(last < lr_max / 1e5 + lr_max * 1e-3);
  // Mid-warmup, against fastai's formula.
  CHECK(s.lr(20, total, lr_max) ==
        doctest::Approx(fastai_cos(lr_max / 25, lr_max, 0.1 / 0.25)).epsilon(1e-12));
  // Monotone segments.
  for (int64_t t = 1; t <= 50; ++t) CHECK(s.lr(t, total, lr_max) > s.lr(t - 1, total, lr_max));
  for (int64_t t = 51; t < total; ++t) CHECK(s.lr(t, total, lr_max) < s.lr(t - 1, total, lr_max));
}

TEST_CASE("one_cycle: momentum 0.95 -> 0.85 at pct_start -> back towards 0.95") {
  OneCycleScheduler s{OneCycleOptions{}};
  const int64_t total = 100;
  CHECK(*s.momentum(0, total) == doctest::Approx(0.95));
  CHECK(*s.momentum(25, total) == doctest::Approx(0.85));
  CHECK(*s.momentum(99, total) == doctest::Approx(fastai_cos(0.85, 0.95, (0.99 - 0.25) / 0.75)));
  CHECK(*s.momentum(99, total) > 0.949);
  for (int64_t t = 1; t <= 25; ++t) CHECK(*s.momentum(t, total) < *s.momentum(t - 1, total));
  for (int64_t t = 26; t < total; ++t) CHECK(*s.momentum(t, total) > *s.momentum(t - 1, total));

  OneCycleOptions no_moms;
  no_moms.moms.clear();
  CHECK_FALSE(OneCycleScheduler(no_moms).momentum(3, total).has_value());
}

TEST_CASE("one_cycle: custom div, pct_start and the edge pct_start values") {
  OneCycleOptions o;
  o.div = 10;
  o.div_final = 100;
  o.pct_start = 0.5;
  OneCycleScheduler s(o);
  CHECK(s.lr(0, 10, 1.0) == doctest::Approx(0.1));
  CHECK(s.lr(5, 10, 1.0) == doctest::Approx(1.0));
  o.pct_start = 0;  // no warmup: starts at lr_max
  CHECK(OneCycleScheduler(o).lr(0, 10, 1.0) == doctest::Approx(1.0));
  o.pct_start = 1;  // warmup only: still rising at the last step
  CHECK(OneCycleScheduler(o).lr(9, 10, 1.0) == doctest::Approx(fastai_cos(0.1, 1.0, 0.9)));
}

TEST_CASE("one_cycle: bad options are recipe errors") {
  std::string file = test::temp_dir("one_cycle_bad") + "/r.toml";
  std::ofstream(file) << "[scheduler]\nname = \"one_cycle\"\ndiv = 0\npct_start = 1.5\nmoms = [0.9]\n";
  RecipeDocument doc(file, {});
  SchedulerRegistry registry("scheduler");
  register_schedulers(registry);
  Options root = doc.root();
  Options t = root.table("scheduler", "");
  registry.parse(t);
  doc.finish();
  const auto& lines = doc.diagnostics().lines();
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].find(":3:7: scheduler.div: value must be > 0") != std::string::npos);
  CHECK(lines[1].find(":4:13: scheduler.pct_start: value 1.5 is out of range") != std::string::npos);
  CHECK(lines[2].find(":5:8: scheduler.moms: expected 3 values") != std::string::npos);
}
