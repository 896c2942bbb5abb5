#include "engine/cli/cli.h"

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/cli/launch_config.h"
#include "engine/launcher/launcher.h"
#include "engine/core/errors.h"
#include "engine/core/preemption.h"
#include "engine/trainer/resume.h"

namespace engine {

int cli_main(int argc, char** argv) {
  CLI::App app{"engine: declarative training from TOML recipes", "engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {  // CLI11 adds the final newline
    std::string v = version_text();
    return v.substr(0, v.size() - 1);
  }, "engine version, git revision, LibTorch, CUDA/NCCL/Gloo");
  auto* version = app.add_subcommand("version", "same as --version: engine version, git revision, LibTorch, CUDA/NCCL/Gloo");
  std::vector<std::string> overrides;
  auto add_set = [&](CLI::App* c) {
    c->add_option("--set", overrides, "override a recipe key: --set optimizer.lr=1e-3 (repeatable)");
  };

  std::string recipe;
  auto* run = app.add_subcommand("run", "train (+ evaluate, + predict) on this process, or as one rank of a job");
  run->add_option("recipe", recipe, "recipe file")->required();
  add_set(run);
  ResumeRequest resume;
  const char* resume_doc = "continue from the newest complete checkpoint of RUN_DIR (or this CHECKPOINT file), exactly; "
                           "without a value: the recipe's own run directory, starting afresh when it has none";
  run->add_option("--resume", resume.from, resume_doc)->expected(0, 1)->type_name("[RUN_DIR|CHECKPOINT]");

  std::vector<std::string> recipes;
  auto* check = app.add_subcommand("check", "validate recipes without training; every error at once");
  check->add_option("recipes", recipes, "recipe files")->required();
  add_set(check);

  auto* test = app.add_subcommand("test", "run recipes and compare with their [expect] bounds (exit 1 on regression)");
  test->add_option("targets", recipes, "recipe files or directories")->required();
  bool record = false;
  test->add_flag("--record", record, "write the measured values into each [expect] `equals` as the new baseline (comments and tolerances kept; min/max untouched)");
  add_set(test);

  std::string kind;
  auto* list = app.add_subcommand("list", "registered components with their options, defaults and docs");
  list->add_option("kind", kind, "datasets|transforms|models|optimizers|schedulers|metrics|callbacks, or recipe (its sections and keys)");

  LaunchOptions launch;
  std::string mixed_precision, config_path = default_launch_config_path();
  auto* lc = app.add_subcommand("launch", "run a recipe on N processes (DDP); one launcher per node");
  lc->add_option("-n,--nproc-per-node,--num-processes", launch.nproc_per_node, "processes on this node (default: engine config's)");
  lc->add_option("--nnodes", launch.nnodes, "machines in the job")->check(CLI::PositiveNumber);
  lc->add_option("--node-rank", launch.node_rank, "this machine's index, 0..nnodes-1")->check(CLI::NonNegativeNumber);
  lc->add_option("--master-addr", launch.master_addr, "address of node 0 (rendezvous)");
  lc->add_option("--master-port", launch.master_port, "rendezvous port (multi-node; default 29500). A single-node job meets through a private file and listens on no port");
  lc->add_option("--threads", launch.threads_per_process, "CPU threads per process (0 = cores / processes)");
  lc->add_option("--mixed-precision", mixed_precision, "no | bf16 | fp16: overrides the recipe")
      ->check(CLI::IsMember({"no", "bf16", "fp16"}));
  lc->add_option("--config-file", config_path, "launch defaults (written by `engine config`)");
  lc->add_option("recipe", recipe, "recipe file")->required();
  add_set(lc);
  lc->add_option("--resume", resume.from, resume_doc)->expected(0, 1)->type_name("[RUN_DIR|CHECKPOINT]");

  std::string run_dir, export_out;
  auto* ex = app.add_subcommand("export", "write one self-contained model file from a finished run (weights, model, eval transforms, classes)");
  ex->add_option("run_dir", run_dir, "run directory of `engine run`")->required();
  ex->add_option("-o,--output", export_out, "file to write (default RUN_DIR/model.export.safetensors)");

  std::vector<std::string> report_dirs;
  std::string report_out;
  int64_t report_top = 16;
  auto* rep = app.add_subcommand("report", "one self-contained HTML page of runs: curves, confusion matrix, worst predictions, "
                                           "recipe differences (written at the end of every `engine run` too)");
  rep->add_option("run_dirs", report_dirs, "run directories; several are overlaid and their recipes compared")->required();
  rep->add_option("-o,--output", report_out, "file to write (default FIRST_RUN_DIR/report.html)");
  rep->add_option("--top", report_top, "worst validation predictions shown per run")->check(CLI::NonNegativeNumber);

  PredictArgs pa;
  auto* pr = app.add_subcommand("predict", "predict with an exported model: label, class index, probabilities per image");
  pr->add_option("model", pa.model, "file written by `engine export`")->required();
  pr->add_option("images", pa.images, "image files (PNG, JPEG, ...)");
  pr->add_option("--csv", pa.csv, "a Kaggle digit-recognizer CSV of unlabeled images instead of image files");
  pr->add_option("-o,--output", pa.output, "with --csv: the submission file to write (default submission.csv)");
  pr->add_flag("--json", pa.json, "print JSON instead of one line per image");
  pr->add_option("--device", pa.device, "cpu | cuda | auto")->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  pr->add_option("--threads", pa.threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  pr->add_option("--batch-size", pa.batch_size, "images per forward pass")->check(CLI::PositiveNumber);
  pr->add_option("--id-column", pa.id_column, "with --csv: header of the id column");
  pr->add_option("--label-column", pa.label_column, "with --csv: header of the label column");
  pr->add_option("--id-start", pa.id_start, "with --csv: id of the first row");

  bool force = false;
  auto* cfg = app.add_subcommand("config", "write the default launch configuration for this machine");
  cfg->add_option("--config-file", config_path, "where to write it");
  cfg->add_flag("--force", force, "overwrite an existing file");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  try {
    const Registries reg = make_registries();
    if (*run) {
      resume.requested = run->count("--resume") > 0;
      return cmd_run(reg, recipe, overrides, resume);
    }
    if (*check) return cmd_check(reg, recipes, overrides);
    if (*test) return cmd_test(reg, recipes, overrides, record);
    if (*list) return cmd_list(reg, kind);
    if (*version) {
      std::fputs(version_text().c_str(), stdout);
      return 0;
    }
    if (*ex) return cmd_export(run_dir, export_out);
    if (*rep) return cmd_report(reg, report_dirs, report_out, report_top);
    if (*pr) return cmd_predict(pa);
    if (*lc) {
      // Flags win over the config file, which wins over the built-in defaults.
      LaunchConfig defaults = read_launch_config(config_path);
      if (lc->count("--nproc-per-node") == 0) launch.nproc_per_node = defaults.num_processes;
      if (lc->count("--threads") == 0) launch.threads_per_process = defaults.threads_per_process;
      if (mixed_precision.empty()) mixed_precision = defaults.mixed_precision;
      resume.requested = lc->count("--resume") > 0;
      return cmd_launch(reg, launch, mixed_precision, recipe, overrides, resume);
    }
    if (*cfg) {
      LaunchConfig c = write_launch_config(config_path, force);
      std::printf("wrote %s: num_processes = %d\n", config_path.c_str(), c.num_processes);
      return 0;
    }
  } catch (const preemption::Preempted& e) {
    if (*e.what()) std::fprintf(stderr, "%s\n", e.what());
    return preemption::kPreemptedExitCode;
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
