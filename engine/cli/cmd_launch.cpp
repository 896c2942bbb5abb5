#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/launcher/launcher.h"
#include "engine/trainer/recipe.h"
#include "engine/trainer/resume.h"

namespace engine {

int cmd_launch(const Registries& reg, const LaunchOptions& options, const std::string& mixed_precision,
               const std::string& recipe, const std::vector<std::string>& overrides, const ResumeRequest& resume) {
  std::vector<std::string> all = overrides;
  if (!mixed_precision.empty()) all.push_back("accelerator.mixed_precision=" + mixed_precision);
  const Recipe r = load_recipe(recipe, all, reg);  // a bad recipe is reported once, here, not by every rank
  // Likewise a checkpoint this job cannot continue (another recipe or world size).
  if (auto point = find_resume_point(resume, r.run_dir()))
    check_resumable(*point, r.resolved_toml, static_cast<int>(options.nproc_per_node * options.nnodes));
  // Each worker is this same binary running `engine run`; it finds its rank in the environment.
  std::vector<std::string> argv{"/proc/self/exe", "run", recipe};
  for (const auto& o : all) argv.insert(argv.end(), {"--set", o});
  for (const auto& a : resume.args()) argv.push_back(a);
  return launch_processes(options, argv);
}

}  // namespace engine
