#include "engine/core/blas_kernels.h"

#include <dlfcn.h>
#include <strings.h>

#include <cstdlib>
#include <optional>

#include <fmt/format.h>

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

BlasKernels choose_blas_kernels() {
  BlasKernels k;
  k.library = library_name();
  k.core = k.openblas_core = openblas_core();
  if (k.library.empty() || k.core.empty()) return k;
  // An OPENBLAS_CORETYPE in the environment was OpenBLAS's pick (it read it at load): a family as new
  // as this CPU runs stays as it is; an older one (a machine image may set one for every program) is
  // replaced like any old pick.
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced) k.forced = forced;
  if (switched_off("ENGINE_BLAS_KERNELS")) return k;
  // By instruction set, never by a timing: a timing taken while other processes share the cores can
  // come out either way, and the two families round differently, so the same command gave different
  // numbers from run to run (a resume test failed in CI that way: one run of two took Haswell).
  const std::string better = better_openblas_core(k.openblas_core, cpu_isa());
  if (better.empty() || !use_openblas_core(better)) return k;
  k.core = better;
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
  return fmt::format("{}, older than this CPU's instruction sets; running its {} kernels instead, as OpenBLAS's newer "
                     "releases pick for such a CPU (ENGINE_BLAS_KERNELS=0 keeps {})",
                     picked, k.core, k.forced.empty() ? "OpenBLAS's choice" : "it");
}

}  // namespace engine
