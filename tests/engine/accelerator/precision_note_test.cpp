// The note a run prints about its precision: bf16 on a CPU without AVX-512 has no native bf16
// kernels (LibTorch's fallbacks are ~8x slower than fp32); the engine emulates them
// (bf16_emulation.h), and the user is told so before any compute. With AVX-512 the native bf16
// GEMMs may still be slower than float32 (an Emerald Rapids without AMX: 83 vs 156 GFLOP/s): said too.
// Where the oneDNN check turned oneDNN off (onednn_convs.h), any LibTorch's bf16 kernels are slow: emulated.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>

#include "engine/accelerator/accelerator.h"
#include "engine/accelerator/bf16_emulation.h"
#include "engine/accelerator/gemm_rates.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/accelerator/world.h"
#include "engine/core/blas_kernels.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/env.h"
#include "tests/support/threads.h"

using namespace engine;

namespace {
std::string note_for(const std::string& precision) {
  AcceleratorOptions o;
  o.mixed_precision = precision;
  o.device = "cpu";
  o.threads = 1;
  return Accelerator::create(o, WorldInfo{})->precision_note();
}
}  // namespace

TEST_CASE(
    "bf16 gets a note where it runs emulated or slower than float32, fp32 gets none") {
  CHECK(note_for("no").empty());
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx512 = __builtin_cpu_supports("avx512bw");
  MESSAGE("this CPU has AVX-512 (avx512bw): " << avx512);
  const std::string note = note_for("bf16");
  MESSAGE("note: " << note);
  const OnednnConvs& onednn = check_onednn_convs();
  if (onednn.turned_off) {
    // oneDNN off (its convolutions were wrong here): no fast bf16 kernels, on any LibTorch.
    CHECK(note.find("with oneDNN off") != std::string::npos);
    CHECK(note.find("fp32 kernels on bf16-rounded operands") != std::string::npos);
    CHECK(install_bf16_emulation());
  } else if (avx512) {
    // Native bf16: a note only where bf16 GEMMs are measured slower than float32 ones. The note measured
    // once, this test again: only clear cases are checked.
    const GemmRates r = measure_cpu_gemm_rates();
    MESSAGE("GFLOP/s at " << torch::get_num_threads() << " thread(s): float32 " << r.float32 << ", bf16 " << r.bf16);
    if (r.bf16 < 0.75 * r.float32) CHECK(note.find("bf16 trains slower here") != std::string::npos);
    if (r.bf16 > 1.33 * r.float32) CHECK(note.empty());
  } else {
    CHECK(note.find("without AVX-512") != std::string::npos);
    // Emulated (LibTorch 1.x): fp32 kernels on bf16-rounded operands; else the slow-kernel advice.
    CHECK((note.find("fp32 kernels on bf16-rounded operands") != std::string::npos ||
           note.find("mixed_precision = \"no\" trains faster") != std::string::npos));
  }
#endif
}

TEST_CASE("LibTorch's own float32 matmuls run on the OpenBLAS kernels the engine chose") {
  // torch::mm reaches OpenBLAS through libblas.so.3: the same dispatch table that select_blas_kernels
  // corrects, or the correction would miss LibTorch's linear layers.
  const BlasKernels& k = select_blas_kernels();  // doctest_main.cpp ran it, as engine's main() does
  const std::string better = better_openblas_core("Prescott", cpu_isa());
  if (k.library.empty() || better.empty() || switched_off("ENGINE_BLAS_KERNELS")) {
    MESSAGE("no OpenBLAS, no AVX2, or ENGINE_BLAS_KERNELS=0: nothing to compare");
    return;
  }
  const engine::test::IntraOpThreads one_thread(1);
  set_blas_threads(1);
  const std::string chosen = openblas_core();
  const double in_use = measure_cpu_gemm_rates().float32;
  REQUIRE(use_openblas_core("Prescott"));
  const double sse3 = measure_cpu_gemm_rates().float32;
  REQUIRE(use_openblas_core(chosen));
  MESSAGE("torch::mm float32, 1 thread: " << chosen << " " << in_use << " GFLOP/s, Prescott " << sse3);
  // The family in use has AVX2 kernels or better (nothing newer to offer an AVX2 CPU): 2.5-5x measured.
  if (better_openblas_core(chosen, CpuIsa{true, false}).empty()) CHECK(in_use > 1.5 * sse3);
}
