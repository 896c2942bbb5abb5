// build/engine: what the user runs. It puts in place the environment that LibTorch's runtimes read
// when they are loaded, then executes build/engine-core (engine/main.cpp) beside it, which holds
// the engine itself.
//
// Why a separate program: libgomp reads OMP_WAIT_POLICY once, in its load-time constructor. With
// the policy unset, LibTorch's OpenMP threads spin between parallel regions and starve the loader
// threads on a busy CPU (measured on 2 busy cores: 19 against 256 img/s; engine/main.cpp). A
// process that links LibTorch cannot set it for itself: the variable has to be in the environment
// before LibTorch is loaded. engine-core therefore used to set it and execute itself again, paying
// LibTorch's load and static initialisation (~0.6 s of CPU here) twice on every command. This
// program links nothing but the C library, so setting the variable and executing engine-core
// costs a millisecond (bench/RESULTS.md, "Start-up").
//
// The same holds for OpenBLAS's OPENBLAS_THREAD_TIMEOUT (engine/core/load_time_env.h). A user's own
// values win. engine-core started directly still sets them (its old re-execution stays as the
// fallback); DDP ranks are engine-core started by engine-core, with the environment already in place.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/core/load_time_env.h"

int main(int argc, char** argv) {
  (void)argc;
  engine::set_load_time_env();  // OMP_WAIT_POLICY, OPENBLAS_THREAD_TIMEOUT (load_time_env.h)

  // engine-core lives beside this program, wherever it was built or copied to (symlinks resolved).
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string core = "engine-core";
  if (n > 0) {
    self[n] = '\0';
    std::string dir(self);
    dir.erase(dir.find_last_of('/') + 1);
    core = dir + core;
  }
  execv(core.c_str(), argv);  // argv[0] unchanged: messages and --help still say "engine"
  std::fprintf(stderr,
               "engine: cannot execute %s: %s\n"
               "  build/engine starts engine-core from its own folder; build both with: cmake --build build --target engine\n",
               core.c_str(), std::strerror(errno));
  return 127;
}
