// The gradient all-reduce alone, on 2 (or ENGINE_BENCH_RANKS) local processes, quiet of any model:
// what `comm_ms_per_step` would be without waits for a slower rank. Build: `ninja -C build
// bench_allreduce`; run: `build/bench_allreduce [MB] [calls]`. Prints per rank the median and min
// of the calls, and a single-core memcpy of the same bytes for scale. ENGINE_SHM_ARENA=0 measures
// the copying path, ENGINE_SHM_ALLREDUCE=0 Gloo.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/accelerator/collectives.h"
#include "engine/accelerator/shared_memory_collectives.h"
#include "engine/accelerator/world.h"
#include "engine/launcher/launcher.h"

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 13.5;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 40;
  const char* r = std::getenv("ENGINE_BENCH_RANKS");
  const int ranks = r ? std::atoi(r) : 2;
  engine::LaunchOptions o;
  o.master_port = 0;
  o.threads_per_process = 1;
  return engine::launch(
      [&] {
        using Clock = std::chrono::steady_clock;
        const auto world = engine::detect_world();
        auto c = engine::with_shared_memory_all_reduce(engine::make_gloo_collectives(world, std::chrono::seconds(30)),
                                                       world, std::chrono::seconds(30));
        const int64_t n = static_cast<int64_t>(mb * 1e6 / 4);
        std::vector<torch::Tensor> g{torch::ones({n})};
        std::vector<double> ms;
        for (int i = 0; i < calls + 5; ++i) {
          c->barrier();
          const auto t0 = Clock::now();
          c->all_reduce_mean(g);  // the DDP gradient call
          const double t = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (i >= 5) ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        std::vector<float> a(n, 1.f), b(n);
        std::vector<double> cp;
        for (int i = 0; i < 10; ++i) {
          const auto t0 = Clock::now();
          std::memcpy(b.data(), a.data(), n * 4);
          cp.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
          a[i] = b[n - 1 - i];
        }
        std::sort(cp.begin(), cp.end());
        std::printf("rank %d: all_reduce_mean of %.1f MB: median %.2f ms, min %.2f ms (%d calls); memcpy %.2f ms\n",
                    c->rank(), mb, ms[ms.size() / 2], ms.front(), calls, cp[cp.size() / 2]);
      },
      ranks, o);
}
