#include "components/schedulers/cosine.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

#include "components/schedulers/all.h"
#include "components/schedulers/constant.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {
}  // namespace

TEST_CASE("cosine: small at step 0, base at the end of warmup, base * min_lr_fraction at the end") {
  CosineOptions o;
  o.warmup_steps = 10;
  o.min_lr_fraction = 0.1;
  CosineScheduler s(o);
  const int64_t total = 110;
  const double base = 1e-3;
  CHECK(s.lr(0, total, base) == doctest::Approx(base / 10));
  CHECK(s.lr(9, total, base) == doctest::Approx(base));
  CHECK(s.lr(10, total, base) == doctest::Approx(base));
  CHECK(s.lr(total - 1, total, base) == doctest::Approx(base * 0.1));
  CHECK(s.lr(60, total, base) == doctest::Approx(base * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 50.0 / 99)))));
  for (int64_t t = 1; t < 10; ++t) CHECK(s.lr(t, total, base) > s.lr(t - 1, total, base));
  for (int64_t t = 11; t < total; ++t) CHECK(s.lr(t, total, base) < s.lr(t - 1, total, base));
  CHECK_FALSE(s.momentum(5, total).has_value());
}

TEST_CASE("cosine: warmup_fraction, no warmup, and degenerate lengths") {
  CosineOptions o;
  o.warmup_fraction = 0.1;
  CosineScheduler s(o);
  CHECK(s.warmup_steps(100) == 10);
  CHECK(s.lr(99, 100, 1.0) == doctest::Approx(0.0));
  CosineScheduler plain{CosineOptions{}};
  CHECK(plain.lr(0, 50, 1.0) == 1.0);
  CHECK(plain.lr(49, 50, 1.0) == doctest::Approx(0.0));
  CHECK(plain.lr(0, 1, 1.0) == 1.0);  // a one-step run: nothing to anneal over
}

TEST_CASE("constant: linear warmup (step + 1) / warmup_steps, then the base lr") {
  ConstantOptions o;
  o.warmup_steps = 4;
  ConstantScheduler s(o);
  CHECK(s.lr(0, 100, 1.0) == 0.25);
  CHECK(s.lr(1, 100, 1.0) == 0.5);
  CHECK(s.lr(3, 100, 1.0) == 1.0);
  CHECK(s.lr(50, 100, 1.0) == 1.0);
  CHECK(ConstantScheduler(ConstantOptions{}).lr(0, 100, 0.3) == 0.3);
}

TEST_CASE("scheduler registry: names, defaults and option errors") {
  SchedulerRegistry registry("scheduler");
  register_schedulers(registry);
  CHECK(registry.names() == std::vector<std::string>{"constant", "cosine", "one_cycle"});
  std::string file = test::temp_dir("cosine_bad") + "/r.toml";
  std::ofstream(file) << "[scheduler]\nname = \"cosine\"\nwarmup_steps = 5\nwarmup_fraction = 0.1\n"
                         "min_lr_fraction = 2\n";
  RecipeDocument doc(file, {});
  Options root = doc.root();
  Options t = root.table("scheduler", "");
  auto factory = registry.parse(t);
  doc.finish();
  const auto& lines = doc.diagnostics().lines();
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].find("scheduler.warmup_fraction: set either warmup_steps or warmup_fraction") !=
        std::string::npos);
  CHECK(lines[1].find("scheduler.min_lr_fraction: value 2 is out of range") != std::string::npos);
  REQUIRE(factory);
  CHECK(factory()->lr(0, 10, 1.0) == doctest::Approx(0.2));  // still builds (warmup_steps = 5 wins)
}
