// `engine --version` / `engine version`: what a bug report needs about this binary. The engine
// side (version, git revision, build type) is engine/core/version.cpp; this file adds LibTorch's
// side, which needs LibTorch's headers and compile definitions.
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <cstdlib>

#include "components/models/packed_gemm.h"
#include "components/models/threads.h"
#include "engine/cli/commands.h"
#include "engine/core/blas_kernels.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/version.h"

namespace engine {

namespace {

// CUDA is compiled into LibTorch when its CUDA library registered the hooks; the CPU stubs throw.
// The CUDA runtime is asked for its version only, which creates no context on any device.
std::string cuda_text() {
  const auto& hooks = at::detail::getCUDAHooks();
  long runtime = 0;
  try {
    runtime = hooks.versionCUDART();
  } catch (const c10::Error&) {
    return "no (a CPU-only LibTorch)";
  }
  const int devices = hooks.getNumGPUs();
  return fmt::format("yes (CUDA runtime {}.{}; {} device{} visible)", runtime / 1000, runtime % 1000 / 10,
                     devices, devices == 1 ? "" : "s");
}

// The BLAS LibTorch calls for float matrix products, and the kernel family it runs (blas_kernels.h).
std::string blas_text() {
  const BlasKernels& k = select_blas_kernels();
  if (k.library.empty()) return "not OpenBLAS (Debian's reference BLAS is ~6 GFLOP/s: apt-get install libopenblas0-pthread)";
  const std::string set = k.forced.empty() ? "" : fmt::format(" (OPENBLAS_CORETYPE={})", k.forced);
  if (!k.switched()) return fmt::format("{}, {} kernels{}", k.library, k.core, set);
  // No timings here: the same binary on the same machine prints the same text.
  return fmt::format("{}, {} kernels (it {} {}, older than this CPU runs)", k.library, k.core,
                     k.forced.empty() ? "picked" : "was given", k.openblas_core);
}

// LibTorch's oneDNN convolutions, as checked on this machine (onednn_convs.h).
std::string onednn_text() {
  const OnednnConvs& r = check_onednn_convs();
  if (!r.checked) return "not checked (LibTorch without oneDNN, oneDNN already off, or ENGINE_ONEDNN_CHECK=0)";
  if (r.turned_off) return fmt::format("off: wrong results here ({}); LibTorch's own convolutions are used", r.wrong);
  return fmt::format("on (its convolutions checked against LibTorch's own: {} agree)", r.probes);
}

// The engine's packed GEMM kernels (packed_gemm.h): the instruction set in use and what runs on them.
std::string packed_text() {
  switch (packed_gemm_isa()) {
    case PackedGemmIsa::avx512:
      return "AVX-512 (ConvNeXt's MLP products; ResNet's small-map convolutions, training and evaluation)";
    case PackedGemmIsa::avx2:
      return "AVX2 (ConvNeXt's MLP products; ResNet's small-map convolutions in evaluation, training's on "
             "OpenBLAS / oneDNN)";
    default:
      return packed_gemm_widest() == PackedGemmIsa::none ? "none (no AVX2 with FMA here): OpenBLAS"
                                                         : "off (ENGINE_PACKED_GEMM=0): OpenBLAS";
  }
}

// A variable that LibTorch's OpenMP threads or OpenBLAS's workers read when this process loaded them:
// build/engine sets each unless the user chose (engine/core/load_time_env.h).
std::string load_time_text(const char* name, const char* unset) {
  const char* value = std::getenv(name);
  if (!value) return fmt::format("{} unset: {}", name, unset);
  return fmt::format("{}={}", name, value);
}

}  // namespace

std::string version_text() {
  // The same conditions as engine/accelerator/{gloo,nccl}_collectives.cpp, which compile their
  // backend only when LibTorch has it (USE_C10D_*) and its headers were found at build time.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
  const char* nccl = "yes";
#else
  const char* nccl = "no";
#endif
#if defined(USE_C10D_GLOO) && __has_include(<gloo/transport/device.h>)
  const char* gloo = "yes";
#else
  const char* gloo = "no";
#endif
  return fmt::format(
      "engine {}\n"
      "  git revision  {}\n"
      "  build type    {}\n"
      "  LibTorch      {}\n"
      "  CUDA          {}\n"
      "  NCCL          {}\n"
      "  Gloo          {}\n"
      "  BLAS          {}\n"
      "  BLAS workers  {}\n"
      "  oneDNN        {}\n"
      "  Packed GEMM   {}\n"
      "  OpenMP        {}\n"
      "  Threads       {} intra-op, engine kernels on {}\n",
      engine_version(), git_revision(), build_type(), TORCH_VERSION, cuda_text(), nccl, gloo, blas_text(),
      load_time_text("OPENBLAS_THREAD_TIMEOUT", "idle workers call sched_yield for ~0.1 s before they sleep"),
      onednn_text(), packed_text(), load_time_text("OMP_WAIT_POLICY", "threads spin between parallel regions"), at::get_num_threads(),
      kernel_threads());
}

}  // namespace engine
