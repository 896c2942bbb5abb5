#include <cstdio>

#include "engine/accelerator/accelerator.h"
#include "engine/cli/commands.h"
#include "engine/report/report.h"
#include "engine/core/preemption.h"
#include "engine/trainer/trainer.h"

namespace engine {

int cmd_run(const Registries& reg, const std::string& recipe_file, const std::vector<std::string>& overrides,
            const ResumeRequest& resume) {
  Recipe recipe = load_recipe(recipe_file, overrides, reg);  // every recipe error before any compute
  auto accelerator = Accelerator::create(recipe.accelerator);
  if (accelerator->is_main()) {
    std::printf("%s\n", recipe.resolved_toml.c_str());
    std::fflush(stdout);  // before any error of this rank reaches stderr
  }
  Trainer trainer(recipe, *accelerator);
  trainer.resume(resume);
  report::ReportAtExit report(reg, recipe.run_dir(), *accelerator);  // report.html when the run ends, even failed
  // From here a SIGTERM/SIGINT finishes the current step, checkpoints on every rank and exits 75.
  preemption::install();
  trainer.run();
  preemption::uninstall();
  return 0;
}

}  // namespace engine
