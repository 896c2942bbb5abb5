#include "engine/cli/cli.h"

#include <cstdio>

namespace engine {

int cli_main(int argc, char** argv) {
  std::fprintf(stderr, "engine: command line under construction\n");
  return 2;
}

}  // namespace engine
