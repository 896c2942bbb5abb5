// engine export RUN_DIR [-o FILE]: one self-contained file to predict with (fastai's learn.export).
#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/trainer/learner.h"

namespace engine {

int cmd_export(const std::string& run_dir, const std::string& out) {
  const std::string path = export_run(run_dir, out);
  std::printf("exported %s -> %s\n", run_dir.c_str(), path.c_str());
  return 0;
}

}  // namespace engine
