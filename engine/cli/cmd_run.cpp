#include <cstdio>

#include "engine/accelerator/accelerator.h"
#include "engine/cli/commands.h"
#include "engine/trainer/trainer.h"

namespace engine {

int cmd_run(const Registries& reg, const std::string& recipe_file, const std::vector<std::string>& overrides) {
  Recipe recipe = load_recipe(recipe_file, overrides, reg);  // every recipe error before any compute
  auto accelerator = Accelerator::create(recipe.accelerator);
  if (accelerator->is_main()) {
    std::printf("%s\n", recipe.resolved_toml.c_str());
    std::fflush(stdout);  // before any error of this rank reaches stderr
  }
  Trainer trainer(recipe, *accelerator);
  trainer.run();
  return 0;
}

}  // namespace engine
