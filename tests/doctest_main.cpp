#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

#include "engine/core/blas_kernels.h"
#include "engine/core/env.h"
#include "tests/support/paths.h"

int main(int argc, char** argv) {
  // Shipped recipes may ask `engine run` for an automatic layout ([accelerator] processes = 0),
  // which would turn every test run into a DDP job sized for the whole machine while ctest runs
  // tests side by side. Tests get one process unless they say otherwise (ENGINE_PROCESSES= on a
  // command line brings the recipe's own setting back).
  setenv("ENGINE_PROCESSES", "1", 0);
  // Likewise one intra-op thread per engine process (recipes leave threads = 0 = all cores): two
  // tests side by side must not each take every core.
  setenv("ENGINE_THREADS", "1", 0);
  // As engine's main(): OpenBLAS's kernels for this CPU, before any test multiplies a matrix.
  engine::select_blas_kernels();
  doctest::Context context(argc, argv);
  const int result = context.run();
  // A full ctest run made ~5 GB of run directories (checkpoints, a 189 MB convnext_small) and left
  // them all in /tmp: the disk filled after a dozen runs. Passing test processes clean up.
  if (result == 0 && !engine::env_is_one("ENGINE_TEST_KEEP")) engine::test::remove_temp_dirs();
  return result;
}
