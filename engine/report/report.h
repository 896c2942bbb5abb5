#pragma once
// `engine report`: one self-contained HTML file (inline SVG charts and CSS, images embedded as
// PNG data URLs; no script library, nothing fetched from the network) from what is on disk in one
// or several run directories:
//   - loss, every metric and the learning rate against epoch (and step, when step lines exist),
//     several runs overlaid;
//   - throughput per epoch and wall time;
//   - per run: the confusion matrix as a heat map with per-class precision/recall, the worst
//     validation predictions as thumbnails (plot_top_losses), where and how it ran (world size,
//     precision, machine, engine version, git revision) and its resolved recipe;
//   - several runs: the recipe differences key by key.
// A partial run (still going, killed, diverged) renders from what exists; what is missing is said
// in the page.
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace engine {
class Accelerator;
struct Registries;
}  // namespace engine

namespace engine::report {

struct ReportOptions {
  std::vector<std::string> run_dirs;  // at least one
  std::string output;                 // "" = <first run dir>/report.html
  size_t top_losses = 16;             // thumbnails per run
};

/// Renders the report as HTML text.
std::string render_report(const ReportOptions& options, const Registries& registries);

/// Renders and writes the report atomically; returns the path written. A directory that is not a
/// run directory is a UserError.
std::string write_report(const ReportOptions& options, const Registries& registries);

/// Placed before Trainer::run() in `engine run`: when it goes out of scope (the run finished, or
/// failed with an exception), the main process writes run_info.json and report.html into the run
/// directory. Nothing is written when the run never started (recipe.resolved.toml not rewritten:
/// bad data found before any step), so an older run's directory keeps its own report. A report
/// failure is printed as a warning and never changes how the run ended.
class ReportAtExit {
 public:
  ReportAtExit(const Registries& registries, std::string run_dir, const Accelerator& accelerator);
  ~ReportAtExit();
  ReportAtExit(const ReportAtExit&) = delete;
  ReportAtExit& operator=(const ReportAtExit&) = delete;

 private:
  const Registries& registries_;
  std::string run_dir_;
  const Accelerator& accelerator_;
  int uncaught_at_start_;
  std::filesystem::file_time_type
      recipe_written_;  // recipe.resolved.toml's mtime before the run (min() = none)
};

}  // namespace engine::report
