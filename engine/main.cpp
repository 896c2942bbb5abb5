#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "engine/cli/cli.h"
#include "engine/core/allocator.h"
#include "engine/core/blas_kernels.h"
#include "engine/core/load_time_env.h"

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads and OpenBLAS's workers read how to wait when they are loaded
  // (engine/core/load_time_env.h), so the variables have to be in the environment before this
  // process starts: build/engine (engine/entry.cpp) sets them and executes this program. Started
  // directly without them, set them and re-execute once (LibTorch loads twice, ~0.6 s).
  if (engine::set_load_time_env()) execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
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
