#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>

#include "engine/accelerator/accelerator.h"
#include "engine/cli/commands.h"
#include "engine/cli/layout.h"
#include "engine/launcher/launcher.h"
#include "engine/report/report.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/preemption.h"
#include "engine/trainer/trainer.h"

namespace engine {

namespace {

// [accelerator] processes != 1 and not already a rank of a job: start this run as a local DDP job
// of this same binary, each rank taking batch_size / N. Returns the job's exit code, or -1 when
// the run stays in this process.
int run_as_local_job(const Registries& reg, const Recipe& recipe, const std::string& recipe_file,
                     const std::vector<std::string>& overrides, const ResumeRequest& resume) {
  int64_t requested = recipe.accelerator.processes;
  if (const char* env = std::getenv("ENGINE_PROCESSES"); env && *env) requested = std::atoll(env);
  if (requested == 1 || detect_world().distributed() || std::getenv("RANK")) return -1;
  int gpus = 0;
  if (recipe.accelerator.device != "cpu") gpus = static_cast<int>(torch::cuda::device_count());
  int64_t threads = recipe.accelerator.threads;
  if (const char* env = std::getenv("ENGINE_THREADS"); threads == 0 && env) threads = std::atoll(env);
  // A resumed run keeps the world its checkpoint was written with (resume refuses any other).
  if (auto point = find_resume_point(resume, recipe.run_dir()); point && requested == 0) {
    auto it = point->file.metadata.find("world_size");
    if (it != point->file.metadata.end()) requested = std::stoll(it->second);
  }
  const BatchNormLayers bn = !reg.models.has_trait(recipe.model_name, "batch_norm") ? BatchNormLayers::none
                             : recipe.accelerator.sync_batchnorm                   ? BatchNormLayers::synchronised
                                                                                   : BatchNormLayers::per_process;
  const Layout l = choose_layout(requested, recipe.data.batch_size, threads, usable_cores(), gpus, bn);
  std::printf("layout: %d process%s x %d thread%s, batch %lld per process = %lld (%s)\n", l.processes,
              l.processes == 1 ? "" : "es", l.threads, l.threads == 1 ? "" : "s",
              static_cast<long long>(l.batch_per_process), static_cast<long long>(recipe.data.batch_size), l.why.c_str());
  if (!l.note.empty()) std::printf("  note: %s\n", l.note.c_str());
  std::fflush(stdout);
  if (l.processes == 1) return -1;
  std::vector<std::string> argv{"/proc/self/exe", "run", recipe_file};
  for (const auto& o : overrides) argv.insert(argv.end(), {"--set", o});
  argv.insert(argv.end(), {"--set", "data.batch_size=" + std::to_string(l.batch_per_process)});
  argv.insert(argv.end(), {"--set", "accelerator.processes=1"});
  for (const auto& a : resume.args()) argv.push_back(a);
  LaunchOptions o;
  o.nproc_per_node = l.processes;
  o.threads_per_process = l.threads;
  return launch_processes(o, argv);
}

}  // namespace

int cmd_run(const Registries& reg, const std::string& recipe_file, const std::vector<std::string>& overrides,
            const ResumeRequest& resume) {
  Recipe recipe = load_recipe(recipe_file, overrides, reg);  // every recipe error before any compute
  if (int rc = run_as_local_job(reg, recipe, recipe_file, overrides, resume); rc >= 0) return rc;
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
