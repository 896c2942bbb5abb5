// engine report RUN_DIR [RUN_DIR...]: one self-contained HTML page per call (engine/report/report.h).
#include <cstdio>

#include "engine/cli/commands.h"
#include "engine/report/report.h"

namespace engine {

int cmd_report(const Registries& reg, const std::vector<std::string>& run_dirs, const std::string& output,
               int64_t top) {
  report::ReportOptions options;
  options.run_dirs = run_dirs;
  options.output = output;
  options.top_losses = static_cast<size_t>(top);
  std::printf("report: %s\n", report::write_report(options, reg).c_str());
  return 0;
}

}  // namespace engine
