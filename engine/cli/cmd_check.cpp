#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/trainer/recipe.h"

namespace engine {

int cmd_check(const Registries& reg, const std::vector<std::string>& recipes, const std::vector<std::string>& overrides) {
  int bad = 0;
  for (const auto& file : recipes) {
    try {
      load_recipe(file, overrides, reg);
      std::printf("ok: %s\n", file.c_str());
    } catch (const UserError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ++bad;
    }
  }
  return bad ? 2 : 0;
}

}  // namespace engine
