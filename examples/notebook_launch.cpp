// examples/notebook_launch.cpp: Accelerate's notebook_launcher, for C++ callers.
//
//   build/notebook_launch [-n N] [RECIPE] [--set key=value]...
//   build/notebook_launch -n 2 recipes/mnist_convnext.toml --set train.epochs=1
//
// The seed trains with `notebook_launcher(training_loop, num_processes=2)`. Here the training
// loop is a plain function, and engine::launch(fn, N) (engine/launcher/launcher.h) forks N
// workers that each run it. Every worker finds its rank in the environment launch() sets
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ENGINE_THREADS), so the function is
// exactly what `engine run` does: load the recipe, create the Accelerator (which joins the Gloo
// group on CPU, NCCL on CUDA), run the Trainer. Only rank 0 prints and writes the run directory.
// launch() returns when every worker is done, or throws RunError naming the first failing rank
// (the others are stopped within seconds).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/accelerator/accelerator.h"
#include "engine/core/errors.h"
#include "engine/core/load_time_env.h"
#include "engine/launcher/launcher.h"
#include "engine/trainer/recipe.h"
#include "engine/trainer/registries.h"
#include "engine/trainer/trainer.h"

int main(int argc, char** argv) {
  // Same as engine/main.cpp: how OpenMP and OpenBLAS threads wait is read when they load, so set it
  // (engine/core/load_time_env.h) and re-exec once.
  if (engine::set_load_time_env()) execv("/proc/self/exe", argv);

  int num_processes = 2;
  std::string recipe_file = "recipes/mnist_convnext.toml";
  std::vector<std::string> overrides;  // "key=value", as `engine run --set`
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-n" && i + 1 < argc) num_processes = std::atoi(argv[++i]);
    else if (a == "--set" && i + 1 < argc) overrides.push_back(argv[++i]);
    else recipe_file = a;
  }

  try {
    const engine::Registries registries = engine::make_registries();
    // Validate in the parent, before any worker exists: a typo is reported once, not N times.
    // (No tensor work here: a parent that initialised CUDA could not fork, and launch() refuses.)
    engine::load_recipe(recipe_file, overrides, registries);

    // The training function: runs once per worker, in the worker's own process.
    auto training_loop = [&] {
      engine::Recipe recipe = engine::load_recipe(recipe_file, overrides, registries);
      auto accelerator = engine::Accelerator::create(recipe.accelerator);  // rendezvous + process group
      engine::Trainer trainer(recipe, *accelerator);
      auto summary = trainer.run();  // fit, reload best, evaluate, predict (sharded, exact)
      if (accelerator->is_main()) {
        for (const auto& [key, value] : summary) std::printf("  %s = %g\n", key.c_str(), value);
      }
    };

    engine::LaunchOptions options;
    options.master_port = 0;  // any free port: several notebooks may run on one machine
    return engine::launch(training_loop, num_processes, options);
  } catch (const engine::UserError& e) {  // bad recipe or arguments (also CUDA already initialised)
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // RunError "rank R failed: ..." from launch()
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
