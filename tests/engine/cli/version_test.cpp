// `engine --version` says what a bug report needs: the engine's version (CMakeLists.txt's
// project VERSION), the git revision it was built from, LibTorch's version and its backends.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <fstream>
#include <iterator>
#include <regex>

#include "components/models/packed_gemm.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/blas_kernels.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// "  LibTorch      1.13.0" -> "1.13.0"
std::string field(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\n  " + name + " +([^\n]*)"))) return "<no " + name + " line>";
  return m[1];
}

}  // namespace

TEST_CASE("engine --version prints the project version, git revision, LibTorch and its backends") {
  auto r = run_command(engine_binary() + " --version");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  std::smatch m;
  const std::string cmake = read_text(source_path("CMakeLists.txt"));
  REQUIRE(std::regex_search(cmake, m, std::regex(R"(project\(engine VERSION ([0-9.]+))")));
  CHECK_MESSAGE(r.output.rfind("engine " + m[1].str() + "\n", 0) == 0, r.output);
  CHECK(field(r.output, "LibTorch") == TORCH_VERSION);

  const std::string rev = field(r.output, "git revision");
  if (rev != "unknown") {
    // Read at build time, not when CMake configured: the checkout's HEAD, "-dirty" with uncommitted
    // changes to tracked files (a binary built after a commit must not name the commit before).
    REQUIRE_MESSAGE(std::regex_match(rev, m, std::regex("([0-9a-f]{7,40})(-dirty)?")), rev);
    const std::string commit = m[1].str();
    auto known = run_command("git -C " + source_path("") + " cat-file -e " + commit + "^{commit}");
    CHECK_MESSAGE(known.exit_code == 0, commit << " is not a commit of this repository: " << known.output);
    auto head = run_command("git -C " + source_path("") + " rev-parse --short=12 HEAD");
    if (head.exit_code == 0)
      CHECK_MESSAGE(head.output.substr(0, head.output.find_first_of(" \n")) == commit,
                    "engine --version names " << commit << ", the checkout is at " << head.output
                                              << "(build again after a commit)");
  }
  CHECK(!field(r.output, "build type").empty());
  const std::string cuda = field(r.output, "CUDA");
  if (torch::cuda::is_available())
    CHECK_MESSAGE(cuda.rfind("yes (CUDA runtime ", 0) == 0, cuda);
  else
    CHECK_MESSAGE(
        std::regex_match(
            cuda, std::regex(R"(no \(a CPU-only LibTorch\)|yes \(CUDA runtime .*; 0 devices visible\))")),
        cuda);
    // This test is compiled against the same LibTorch, with the same definitions and include path.
#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)
  CHECK(field(r.output, "NCCL") == "yes");
#else
  CHECK(field(r.output, "NCCL") == "no");
#endif
#if defined(USE_C10D_GLOO) && __has_include(<gloo/transport/device.h>)
  CHECK(field(r.output, "Gloo") == "yes");
#else
  CHECK(field(r.output, "Gloo") == "no");
#endif

  auto sub = run_command(engine_binary() + " version");
  CHECK(sub.exit_code == 0);
  CHECK(sub.output == r.output);
}

TEST_CASE("engine --version names OpenBLAS's kernels: old ones are replaced, OPENBLAS_CORETYPE's too, ENGINE_BLAS_KERNELS=0 keeps them") {
  auto forced = run_command("OPENBLAS_CORETYPE=Prescott " + engine_binary() + " --version");
  REQUIRE_MESSAGE(forced.exit_code == 0, forced.output);
  if (field(forced.output, "BLAS").rfind("OpenBLAS", 0) != 0) {
    MESSAGE("LibTorch does not run OpenBLAS here: " << field(forced.output, "BLAS"));
    return;
  }
  // An environment's family older than this CPU runs is replaced as OpenBLAS's own pick would be
  // (on any AVX2 CPU: SSE3 kernels are 2.5-5x slower); ENGINE_BLAS_KERNELS=0 keeps it.
  const std::string forced_line = field(forced.output, "BLAS");
  const std::string better_than_sse3 = engine::better_openblas_core("Prescott", engine::cpu_isa());
  if (better_than_sse3.empty())
    CHECK(std::regex_match(forced_line, std::regex(R"(OpenBLAS [0-9.]+, Prescott kernels \(OPENBLAS_CORETYPE=Prescott\))")));
  else
    CHECK_MESSAGE(forced_line.find(", " + better_than_sse3 + " kernels (it was given Prescott, older than this CPU runs") !=
                      std::string::npos,
                  forced_line);
  const std::string pinned =
      field(run_command("OPENBLAS_CORETYPE=Prescott ENGINE_BLAS_KERNELS=0 " + engine_binary() + " --version").output, "BLAS");
  CHECK_MESSAGE(std::regex_match(pinned, std::regex(R"(OpenBLAS [0-9.]+, Prescott kernels \(OPENBLAS_CORETYPE=Prescott\))")), pinned);
  // The rest without the machine's own OPENBLAS_CORETYPE, where its image sets one.
  const std::string unset = "env -u OPENBLAS_CORETYPE ";
  auto kept = run_command(unset + "ENGINE_BLAS_KERNELS=0 " + engine_binary() + " --version");
  std::smatch m;
  const std::string kept_line = field(kept.output, "BLAS");
  REQUIRE_MESSAGE(std::regex_match(kept_line, m, std::regex(R"(OpenBLAS [0-9.]+, (\w+) kernels)")), kept_line);
  const std::string picked = m[1];
  const std::string better = engine::better_openblas_core(picked, engine::cpu_isa());
  const std::string line = field(run_command(unset + engine_binary() + " --version").output, "BLAS");
  MESSAGE("OpenBLAS picked " << picked << "; engine: " << line);
  if (better.empty()) {
    CHECK(line == kept_line);  // nothing better for this CPU
  } else if (picked == "Prescott") {
    // SSE3 kernels on an AVX2 or AVX-512 CPU (OpenBLAS 0.3.21 on a model it does not know): 2.5-5x
    // slower, always replaced.
    CHECK(line.find(", " + better + " kernels (it picked Prescott") != std::string::npos);
  } else {
    // An older family for this CPU's instruction sets (Haswell on an AVX-512 Zen): replaced too, by
    // instruction set, not by a timing (blas_kernels.h).
    CHECK(line.find(", " + better + " kernels (it picked " + picked + ", older than this CPU runs)") != std::string::npos);
  }
}

TEST_CASE("engine --version says whether LibTorch's oneDNN convolutions were checked, kept or turned off") {
  // The same machine and LibTorch as this test process, which ran the same check (onednn_setup.cpp).
  const engine::OnednnConvs& here = engine::check_onednn_convs();
  const std::string line = field(run_command(engine_binary() + " --version").output, "oneDNN");
  if (!here.checked)
    CHECK_MESSAGE(line.rfind("not checked", 0) == 0, line);
  else if (here.turned_off)
    CHECK_MESSAGE(std::regex_match(line, std::regex(R"(off: wrong results here \((float|bf16) .*% off\); LibTorch's own convolutions are used)")), line);
  else
    CHECK_MESSAGE(std::regex_match(line, std::regex(R"(on \(its convolutions checked against LibTorch's own: [0-9]+ agree\))")), line);
  const std::string skipped = field(run_command("ENGINE_ONEDNN_CHECK=0 " + engine_binary() + " --version").output, "oneDNN");
  CHECK_MESSAGE(skipped.rfind("not checked", 0) == 0, skipped);
}

TEST_CASE("engine --version names the packed GEMM kernels' instruction set, and ENGINE_PACKED_GEMM narrows it") {
  const std::string widest = engine::packed_gemm_isa_name(engine::packed_gemm_widest());
  const std::string line = field(run_command("env -u ENGINE_PACKED_GEMM " + engine_binary() + " --version").output, "Packed GEMM");
  if (engine::packed_gemm_widest() == engine::PackedGemmIsa::none)
    CHECK_MESSAGE(line.rfind("none (no AVX2 with FMA here)", 0) == 0, line);
  else
    CHECK_MESSAGE(line.rfind(widest + " (", 0) == 0, line);
  const std::string off = field(run_command("ENGINE_PACKED_GEMM=0 " + engine_binary() + " --version").output, "Packed GEMM");
  if (engine::packed_gemm_widest() != engine::PackedGemmIsa::none) CHECK_MESSAGE(off.rfind("off (", 0) == 0, off);
  const std::string avx2 = field(run_command("ENGINE_PACKED_GEMM=avx2 " + engine_binary() + " --version").output, "Packed GEMM");
  if (engine::packed_gemm_widest() != engine::PackedGemmIsa::none) CHECK_MESSAGE(avx2.rfind("AVX2 (", 0) == 0, avx2);
}

TEST_CASE("build/engine starts LibTorch once per command, OpenMP's threads wait passively and OpenBLAS's idle workers sleep at once, unless the user set OMP_WAIT_POLICY or OPENBLAS_THREAD_TIMEOUT") {
  // libgomp reads OMP_WAIT_POLICY when it is loaded, so the variable must be in the environment before
  // LibTorch is (engine/entry.cpp). LD_DEBUG=files names each library initialised, in every program
  // the command executes.
  auto r = run_command("env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT LD_DEBUG=files " + engine_binary() + " --version");
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(field(r.output, "OpenMP") == "OMP_WAIT_POLICY=PASSIVE");
  CHECK(field(r.output, "BLAS workers") == "OPENBLAS_THREAD_TIMEOUT=4");
  const std::regex init_line("calling init: [^\n]*/libtorch_cpu\\.so");
  const auto inits = std::distance(std::sregex_iterator(r.output.begin(), r.output.end(), init_line), std::sregex_iterator());
  CHECK_MESSAGE(inits == 1, "libtorch_cpu initialised " << inits << " times by one `engine --version`");

  auto user = run_command("OMP_WAIT_POLICY=active OPENBLAS_THREAD_TIMEOUT=20 " + engine_binary() + " --version");
  REQUIRE_MESSAGE(user.exit_code == 0, user.output);
  CHECK(field(user.output, "OpenMP") == "OMP_WAIT_POLICY=active");
  CHECK(field(user.output, "BLAS workers") == "OPENBLAS_THREAD_TIMEOUT=20");

  // engine-core started directly (as a debugger or perf might) still sets it, by executing itself again.
  const std::string core = engine_binary().substr(0, engine_binary().find_last_of('/') + 1) + "engine-core";
  auto direct = run_command("env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT " + core + " --version");
  REQUIRE_MESSAGE(direct.exit_code == 0, direct.output);
  CHECK(field(direct.output, "OpenMP") == "OMP_WAIT_POLICY=PASSIVE");
  CHECK(field(direct.output, "BLAS workers") == "OPENBLAS_THREAD_TIMEOUT=4");
  CHECK(direct.output == run_command(engine_binary() + " --version").output);
  // One variable missing is enough: engine-core sets it and executes itself again, so that OpenBLAS,
  // loaded before main, reads it (LibTorch initialised twice: once before, once after).
  auto half = run_command("env -u OPENBLAS_THREAD_TIMEOUT OMP_WAIT_POLICY=PASSIVE LD_DEBUG=files " + core + " --version");
  REQUIRE_MESSAGE(half.exit_code == 0, half.output);
  CHECK(field(half.output, "BLAS workers") == "OPENBLAS_THREAD_TIMEOUT=4");
  const auto half_inits = std::distance(std::sregex_iterator(half.output.begin(), half.output.end(), init_line), std::sregex_iterator());
  CHECK_MESSAGE(half_inits == 2, "libtorch_cpu initialised " << half_inits << " times: engine-core did not execute itself again");
}

TEST_CASE("engine --version: the engine's own kernels run on every intra-op thread (OpenMP compiled in, cmake/EngineOpenMP.cmake)") {
  // Without -fopenmp the `#pragma omp parallel` inside at::parallel_for is dropped from the engine's
  // translation units: its kernels then run on one thread while LibTorch's ops use all of them.
  for (const char* threads : {"1", "2", "3"}) {
    auto r = run_command(std::string("OMP_NUM_THREADS=") + threads + " " + engine_binary() + " --version");
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    CHECK(field(r.output, "Threads") == fmt::format("{} intra-op, engine kernels on {}", threads, threads));
  }
}
