// OpenBLAS's kernel family: which one a CPU should get, switching families leaves every product
// right, and an OpenBLAS stuck on its oldest kernels is moved to this CPU's own (engine/core/blas_kernels.h).
// test_base does not link LibTorch: OpenBLAS is loaded here as LibTorch loads it, from libblas.so.3's
// provider, so that the tests see the library every engine process runs.
#include "engine/core/blas_kernels.h"

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/blas.h"

namespace {

bool load_openblas() {
  static const bool loaded = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_GLOBAL) != nullptr;
  return loaded;
}

// Largest |C - A B| over a 67 x 45 x 131 product (sizes that are no multiple of any kernel's block),
// against a double-precision reference.
double sgemm_error() {
  REQUIRE(engine::blas_sgemm_available());
  const int m = 67, n = 45, k = 131;
  std::vector<float> a(m * k), b(k * n), c(m * n, 7.0f);
  for (int i = 0; i < m * k; ++i) a[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < k * n; ++i) b[i] = static_cast<float>((i * 53) % 89) / 44.0f - 1.0f;
  // Row-major: A is m x k, B k x n, C m x n.
  engine::sgemm_rows(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  double worst = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += static_cast<double>(a[i * k + p]) * b[p * n + j];
      worst = std::max(worst, std::abs(ref - c[i * n + j]));
    }
  return worst;
}

// The family this CPU runs beyond OpenBLAS's oldest (Prescott), or "" (with a message) where there is
// nothing to choose between: no OpenBLAS loaded, no AVX2, or ENGINE_BLAS_KERNELS set.
std::string family_to_choose() {
  if (!load_openblas()) {
    MESSAGE("no libopenblas.so.0 here (tools/setup.sh installs it)");
    return "";
  }
  const std::string better = engine::better_openblas_core("Prescott", engine::cpu_isa());
  if (better.empty() || std::getenv("ENGINE_BLAS_KERNELS")) {
    MESSAGE("no AVX2 on this CPU, or ENGINE_BLAS_KERNELS is set: nothing to choose");
    return "";
  }
  return better;
}

// Sets (or, with nullptr, unsets) an environment variable for one scope; puts the old value back.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("better_openblas_core: the CPU's own kernel generation when OpenBLAS picked an older one") {
  const engine::CpuIsa avx512{true, true}, avx2{true, false}, sse{false, false};
  CHECK(engine::better_openblas_core("Prescott", avx512) == "SkylakeX");  // OpenBLAS 0.3.21 on Emerald Rapids
  CHECK(engine::better_openblas_core("Haswell", avx512) == "SkylakeX");
  CHECK(engine::better_openblas_core("zen", avx512) == "SkylakeX");  // any case
  CHECK(engine::better_openblas_core("Prescott", avx2) == "Haswell");
  CHECK(engine::better_openblas_core("Sandybridge", avx2) == "Haswell");
  // Already the CPU's generation, or nothing better to run: unchanged.
  CHECK(engine::better_openblas_core("SkylakeX", avx512) == "");
  CHECK(engine::better_openblas_core("Cooperlake", avx512) == "");
  CHECK(engine::better_openblas_core("SapphireRapids", avx512) == "");
  CHECK(engine::better_openblas_core("Zen", avx2) == "");
  CHECK(engine::better_openblas_core("Haswell", avx2) == "");
  CHECK(engine::better_openblas_core("Prescott", sse) == "");
}

TEST_CASE("use_openblas_core: OpenBLAS runs the family asked for, products stay right, unknown names change nothing") {
  if (!load_openblas()) {
    MESSAGE("no libopenblas.so.0 here (tools/setup.sh installs it): nothing to switch");
    return;
  }
  const std::string original = engine::openblas_core();
  REQUIRE(!original.empty());
  const char* env = std::getenv("OPENBLAS_CORETYPE");  // a machine's image may set one
  const std::optional<std::string> env_before = env ? std::optional<std::string>(env) : std::nullopt;
  const double base_error = sgemm_error();
  CHECK(base_error < 1e-3);
  // Prescott is in every x86-64 DYNAMIC_ARCH build: the family an unknown CPU model falls back to.
  REQUIRE(engine::use_openblas_core("Prescott"));
  CHECK(engine::openblas_core() == "Prescott");
  CHECK(sgemm_error() < 1e-3);
  const std::string better = engine::better_openblas_core("Prescott", engine::cpu_isa());
  if (!better.empty()) {
    REQUIRE(engine::use_openblas_core(better));
    CHECK(engine::openblas_core() == better);
    CHECK(sgemm_error() < 1e-3);
  }
  CHECK_FALSE(engine::use_openblas_core("NoSuchCore"));
  CHECK(engine::openblas_core() == (better.empty() ? "Prescott" : better));
  REQUIRE(engine::use_openblas_core(original));
  CHECK(engine::openblas_core() == original);
  // The environment is left as it was.
  env = std::getenv("OPENBLAS_CORETYPE");
  CHECK((env ? std::optional<std::string>(env) : std::nullopt) == env_before);
}

TEST_CASE("choose_blas_kernels: an OpenBLAS on an older family is moved to this CPU's, the same way on every call") {
  const std::string better = family_to_choose();
  if (better.empty()) return;
  const std::string original = engine::openblas_core();
  const ScopedEnv no_forced_core("OPENBLAS_CORETYPE", nullptr);  // where the machine's image sets one
  // Prescott: as OpenBLAS 0.3.21 leaves a CPU model it does not know; Haswell: its pick for an AVX-512
  // Zen. The choice is the instruction sets' (better_openblas_core), never a timing: two families
  // round differently, and a timing on a busy machine went one way or the other from run to run.
  for (const std::string given : {"Prescott", "Haswell"}) {
    const std::string want = engine::better_openblas_core(given, engine::cpu_isa());
    if (want.empty()) continue;  // Haswell on an AVX2 CPU: already its family
    for (int call = 0; call < 3; ++call) {
      CAPTURE(given);
      CAPTURE(call);
      REQUIRE(engine::use_openblas_core(given));
      const engine::BlasKernels k = engine::choose_blas_kernels();
      CHECK(k.openblas_core == given);
      CHECK(k.switched());
      CHECK(k.core == want);
      CHECK(engine::openblas_core() == want);
      CHECK(sgemm_error() < 1e-3);
      const std::string note = engine::blas_kernels_note(k);
      CHECK(note.find("picked its " + given + " kernels, older than this CPU's instruction sets; running its " + want) !=
            std::string::npos);
    }
  }
  REQUIRE(engine::use_openblas_core(original));
}

TEST_CASE("choose_blas_kernels: an older OPENBLAS_CORETYPE is replaced by this CPU's family, one as new stays, ENGINE_BLAS_KERNELS=0 keeps it") {
  const std::string better = family_to_choose();
  if (better.empty()) return;
  const std::string original = engine::openblas_core();
  {
    // A machine image's setting for every program (one Zen 5 VM here: Haswell), as OpenBLAS read it.
    const ScopedEnv forced("OPENBLAS_CORETYPE", "prescott");  // any case, as OpenBLAS reads it
    REQUIRE(engine::use_openblas_core("Prescott"));
    const engine::BlasKernels k = engine::choose_blas_kernels();
    CHECK(k.forced == "prescott");
    CHECK(k.openblas_core == "Prescott");
    CHECK(k.switched());
    CHECK(k.core == better);
    CHECK(engine::openblas_core() == better);
    CHECK(std::string(std::getenv("OPENBLAS_CORETYPE")) == "prescott");  // left for the processes it starts
    CHECK(sgemm_error() < 1e-3);
    const std::string note = engine::blas_kernels_note(k);
    CHECK(note.find("OPENBLAS_CORETYPE=prescott in the environment gave") != std::string::npos);
    CHECK(note.find("ENGINE_BLAS_KERNELS=0 keeps it") != std::string::npos);
  }
  {
    const ScopedEnv forced("OPENBLAS_CORETYPE", "Prescott");
    const ScopedEnv off("ENGINE_BLAS_KERNELS", "0");
    REQUIRE(engine::use_openblas_core("Prescott"));
    const engine::BlasKernels k = engine::choose_blas_kernels();
    CHECK_FALSE(k.switched());
    CHECK(engine::openblas_core() == "Prescott");
    CHECK(engine::blas_kernels_note(k).empty());
  }
  {
    // Already this CPU's generation: nothing changed.
    const ScopedEnv forced("OPENBLAS_CORETYPE", better.c_str());
    REQUIRE(engine::use_openblas_core(better));
    const engine::BlasKernels k = engine::choose_blas_kernels();
    CHECK(k.core == better);
    CHECK_FALSE(k.switched());
  }
  REQUIRE(engine::use_openblas_core(original));
}
