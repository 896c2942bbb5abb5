#include "engine/core/blas_kernels.h"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "engine/core/blas.h"
#include "engine/core/env.h"

namespace engine {
namespace {

// OpenBLAS's exported entry points, looked up at run time (LibTorch loads OpenBLAS; nothing to link).
template <typename Fn>
Fn symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}
using CharFn = char* (*)();
using VoidFn = void (*)();
using IntFn = int (*)();
using SetIntFn = void (*)(int);

bool same_name(const std::string& a, const std::string& b) { return strcasecmp(a.c_str(), b.c_str()) == 0; }

// Kernel generations of OpenBLAS's x86-64 families: 3 AVX-512, 2 AVX2 + FMA, 1 AVX, 0 older (SSE).
int core_level(const std::string& core) {
  for (const char* c : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (same_name(core, c)) return 3;
  for (const char* c : {"Haswell", "Zen", "Excavator"})
    if (same_name(core, c)) return 2;
  for (const char* c : {"Sandybridge", "Bulldozer", "Piledriver", "Steamroller"})
    if (same_name(core, c)) return 1;
  return 0;
}

// Best-of-5 GFLOP/s of a 256^3 sgemm (blas.h's sgemm_rows) on the calling thread, OpenBLAS's pool held
// at one thread.
double sgemm_gflops() {
  auto get_threads = symbol<IntFn>("openblas_get_num_threads");
  auto set_threads = symbol<SetIntFn>("openblas_set_num_threads");
  if (!blas_sgemm_available() || !get_threads || !set_threads) return 0;
  const int n = 256, threads = get_threads();
  set_threads(1);
  std::vector<float> a(n * n), b(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.125f - 1.0f;
    b[i] = static_cast<float>(i % 13) * 0.25f - 1.5f;
  }
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    sgemm_rows(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);  // the first call warms caches and OpenBLAS's buffers
  }
  set_threads(threads);
  return 2.0 * n * n * n / best / 1e9;
}

std::string library_name() {
  auto config = symbol<CharFn>("openblas_get_config");
  if (!config) return "";
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
  std::string s = config();
  size_t end = s.find(' ');
  if (end != std::string::npos) end = s.find(' ', end + 1);
  return s.substr(0, end);
}

}  // namespace

// Times an sgemm with `better` against the family in use (`current`); `better` stays in use only
// when `keep` and it ran >= 1.1x faster, else `current` is put back. {0, 0} when nothing could be timed.
struct Trial {
  double current_gflops = 0, better_gflops = 0;
  // 10% is above the noise of two back-to-back timings on a busy machine; a family that is not faster
  // here (a CPU whose AVX-512 units are narrow, say) is not worth a change.
  bool faster() const { return current_gflops > 0 && better_gflops >= 1.1 * current_gflops; }
};
Trial try_core(const std::string& current, const std::string& better, bool keep) {
  Trial t;
  t.current_gflops = sgemm_gflops();
  if (t.current_gflops <= 0 || !use_openblas_core(better)) return {};  // no sgemm_ to time: nothing is changed
  t.better_gflops = sgemm_gflops();
  if (!keep || !t.faster()) use_openblas_core(current);
  return t;
}

BlasKernels choose_blas_kernels() {
  BlasKernels k;
  k.library = library_name();
  k.core = k.openblas_core = openblas_core();
  if (k.library.empty() || k.core.empty()) return k;
  // An OPENBLAS_CORETYPE in the environment was OpenBLAS's pick (it read it at load): a family as new
  // as this CPU runs stays as it is; an older one (a machine image may set one for every program) is
  // timed against the CPU's own like any old pick, and replaced where that is faster.
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced) k.forced = forced;
  if (switched_off("ENGINE_BLAS_KERNELS")) return k;
  const std::string better = better_openblas_core(k.openblas_core, cpu_isa());
  if (better.empty()) return k;
  const Trial t = try_core(k.openblas_core, better, /*keep=*/true);
  if (!t.faster()) return k;
  k.core = openblas_core();
  k.openblas_gflops = t.current_gflops;
  k.core_gflops = t.better_gflops;
  return k;
}

CpuIsa cpu_isa() {
  CpuIsa isa;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  isa.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
  return isa;
}

std::string better_openblas_core(const std::string& chosen, const CpuIsa& isa) {
  const int level = core_level(chosen);
  if (isa.avx512 && level < 3) return "SkylakeX";
  if (isa.avx2_fma && level < 2) return "Haswell";
  return "";
}

std::string openblas_core() {
  auto name = symbol<CharFn>("openblas_get_corename");
  return name ? std::string(name()) : std::string();
}

bool use_openblas_core(const std::string& core) {
  auto quit = symbol<VoidFn>("gotoblas_dynamic_quit");
  auto init = symbol<VoidFn>("gotoblas_dynamic_init");
  if (!quit || !init || core.empty()) return false;
  const std::string before = openblas_core();
  if (same_name(before, core)) return true;
  // OpenBLAS reads OPENBLAS_CORETYPE when it (re)builds its dispatch table; the environment is put
  // back afterwards, so that processes this one starts make their own choice.
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved = env ? std::optional<std::string>(env) : std::nullopt;
  auto set_env_and_init = [&](const std::string& name) {
    setenv("OPENBLAS_CORETYPE", name.c_str(), 1);
    quit();
    init();
  };
  set_env_and_init(core);
  bool ok = same_name(openblas_core(), core);
  if (!ok) set_env_and_init(before);  // an unknown name: OpenBLAS fell back to something else
  if (saved) setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else unsetenv("OPENBLAS_CORETYPE");
  return ok;
}

const BlasKernels& select_blas_kernels() {
  static const BlasKernels k = choose_blas_kernels();
  return k;
}

std::string blas_kernels_note() { return blas_kernels_note(select_blas_kernels()); }

std::string blas_kernels_note(const BlasKernels& k) {
  if (!k.switched()) return "";
  const std::string picked = k.forced.empty() ? fmt::format("{} picked its {} kernels", k.library, k.openblas_core)
                                              : fmt::format("OPENBLAS_CORETYPE={} in the environment gave {} its {} kernels",
                                                            k.forced, k.library, k.openblas_core);
  return fmt::format("{}, older than this CPU supports; running its {} kernels instead: sgemm {:.0f} vs {:.0f} GFLOP/s at one thread, "
                     "measured at start (ENGINE_BLAS_KERNELS=0 keeps {})",
                     picked, k.core, k.core_gflops, k.openblas_gflops, k.forced.empty() ? "OpenBLAS's choice" : "it");
}

}  // namespace engine
