#include "engine/cli/cli.h"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/core/errors.h"

namespace engine {

int cli_main(int argc, char** argv) {
  CLI::App app{"engine: declarative training from TOML recipes", "engine"};
  app.require_subcommand(1);
  std::vector<std::string> overrides;
  auto add_set = [&](CLI::App* c) {
    c->add_option("--set", overrides, "override a recipe key: --set optimizer.lr=1e-3 (repeatable)");
  };

  std::string recipe;
  auto* run = app.add_subcommand("run", "train (+ evaluate, + predict) on this process, or as one rank of a job");
  run->add_option("recipe", recipe, "recipe file")->required();
  add_set(run);

  std::vector<std::string> recipes;
  auto* check = app.add_subcommand("check", "validate recipes without training; every error at once");
  check->add_option("recipes", recipes, "recipe files")->required();
  add_set(check);

  auto* test = app.add_subcommand("test", "run recipes and compare with their [expect] bounds (exit 1 on regression)");
  test->add_option("targets", recipes, "recipe files or directories")->required();
  add_set(test);

  std::string kind;
  auto* list = app.add_subcommand("list", "registered components with their options, defaults and docs");
  list->add_option("kind", kind, "datasets|transforms|models|optimizers|schedulers|metrics|callbacks");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    const Registries reg = make_registries();
    if (*run) return cmd_run(reg, recipe, overrides);
    if (*check) return cmd_check(reg, recipes, overrides);
    if (*test) return cmd_test(reg, recipes, overrides);
    if (*list) return cmd_list(reg, kind);
  } catch (const UserError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 2;
}

}  // namespace engine
