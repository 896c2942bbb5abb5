#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "engine/cli/cli.h"
#include "engine/core/allocator.h"
#include "engine/core/blas_kernels.h"

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads spin-wait between parallel regions by default. With loader threads
  // (or anything else) competing for the same cores, spinning threads starve the ones doing work:
  // measured here on 2 busy cores, convnext_atto trained at 19 img/s with spinning and 256 img/s
  // with passive waiting. libgomp reads the policy once, when it is loaded, so it has to be in the
  // environment before this process starts: build/engine (engine/entry.cpp) sets it and executes
  // this program. Started directly without it, set it and re-execute once (LibTorch loads twice,
  // ~0.6 s). A user's own setting wins.
  if (!std::getenv("OMP_WAIT_POLICY")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
  }
  // After the re-exec (mallopt settings do not survive exec) and before any training thread: keep
  // freed tensor buffers in the heap instead of returning them to the OS every step. Measured on
  // 2 cores: sys time and train img/s in bench/RESULTS.md. Every engine process (DDP ranks too,
  // which start this same binary) passes here.
  engine::tune_allocator();
  // Before any BLAS call: OpenBLAS may have picked kernels older than this CPU runs (a CPU model it
  // does not know gets its SSE3 ones, 5x slower measured); blas_kernels.h checks and corrects that.
  engine::select_blas_kernels();
  // A file-size limit (ulimit -f, a quota) would otherwise kill the process with SIGXFSZ in the
  // middle of a checkpoint write; ignored, the write fails with EFBIG and the engine says which
  // file could not be written, leaving the previous checkpoint as it was.
  signal(SIGXFSZ, SIG_IGN);
  return engine::cli_main(argc, argv);
}
