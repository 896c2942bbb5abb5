#include "engine/report/report.h"

#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <map>

#include "engine/accelerator/accelerator.h"
#include "engine/core/errors.h"
#include "engine/core/preemption.h"
#include "engine/core/version.h"
#include "engine/io/atomic_file.h"
#include "engine/report/curves.h"
#include "engine/report/html.h"
#include "engine/report/run_data.h"
#include "engine/report/run_info.h"
#include "engine/report/run_sections.h"
#include "engine/report/top_losses.h"

namespace engine::report {

namespace {

const char* kStyle = R"css(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#f6f7f9}
header{background:#1d2433;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#b8c0d0;font-size:12px}
nav{padding:6px 24px;background:#fff;border-bottom:1px solid #dde}nav a{margin-right:14px;color:#1f5fa8;text-decoration:none}
main{padding:8px 24px 40px}section{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:12px 16px;margin:14px 0}
h2{font-size:17px;margin:2px 0 10px}h3{font-size:15px;margin:14px 0 6px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(370px,1fr));gap:12px}
.chart-box{margin:0;border:1px solid #eceef2;border-radius:4px;padding:6px}
.chart-box figcaption{font-weight:600;font-size:13px;margin:0 0 2px 4px}
svg.chart{width:100%;height:auto;display:block}
svg.chart .plot{fill:#fcfcfd;stroke:#c9cdd6}svg.chart .grid{stroke:#eceef2}
svg.chart .tick{font-size:12px;fill:#555}svg.chart .axis-label{font-size:13px;fill:#333}
svg.chart .series{fill:none;stroke-width:2;stroke-linejoin:round}
svg.chart .non-finite path{stroke:#d62728;stroke-width:2.2}svg.chart .no-data{fill:#999;font-size:13px}
.legend{font-size:12px;margin:2px 4px}.legend span{margin-right:12px;white-space:nowrap}.legend svg{vertical-align:middle;margin-right:3px}
table.data,table.run-info{border-collapse:collapse;font-size:13px}
table.data th,table.data td,table.run-info th,table.run-info td{border-bottom:1px solid #eceef2;padding:4px 10px;text-align:left;vertical-align:top}
table.data td.num{text-align:right;font-variant-numeric:tabular-nums}
table.run-info th{color:#555;font-weight:500;white-space:nowrap}
.tag{border-radius:3px;padding:1px 6px;font-size:12px;font-weight:600}
.tag.good{background:#e3f4e6;color:#1d6b2c}.tag.warn{background:#fff3d6;color:#7a5600}.tag.bad{background:#fde2e2;color:#a11d1d}
b.good{color:#1d6b2c}b.bad,span.bad{color:#c62828}.muted{color:#888}
.note{margin:6px 0;padding:6px 10px;border-radius:4px;background:#fff8e6;border-left:4px solid #f0b429}
.note.bad{background:#fdecec;border-left-color:#d62728}
.grid2{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
table.confusion-matrix{border-collapse:collapse;font-size:12px;font-variant-numeric:tabular-nums}
table.confusion-matrix caption{text-align:left;font-size:13px;margin-bottom:4px}
table.confusion-matrix th,table.confusion-matrix td{border:1px solid #e3e5ea;padding:3px 7px;text-align:right;min-width:26px}
table.confusion-matrix th.corner{font-weight:400;color:#666;font-size:11px}
table.confusion-matrix .pr,table.confusion-matrix tr.pr td{background:#f4f5f8;color:#333}
.top-losses{display:flex;flex-wrap:wrap;gap:8px}
.top-loss{margin:0;width:132px;border:1px solid #e1e4ea;border-radius:4px;padding:6px;background:#fff;font-size:11px}
.top-loss.wrong{border-color:#f1b0b0}
.top-loss img{width:96px;height:auto;display:block;margin:0 auto 4px;image-rendering:pixelated;background:#000}
.top-loss .no-image{width:96px;height:96px;margin:0 auto 4px;background:#eee;color:#999;display:flex;align-items:center;justify-content:center}
.top-loss .muted{word-break:break-all}
details pre{background:#f4f5f8;padding:10px;overflow:auto;font-size:12px;max-height:480px}
footer{color:#888;font-size:12px;padding:0 24px 20px}
)css";

// The page's only script: it records load errors (a broken image, a script error) and marks the
// <body> when none happened, so a headless browser check can tell a clean render from a broken one.
const char* kErrorProbe =
    "<script>window.reportErrors=[];window.addEventListener('error',function(e){"
    "window.reportErrors.push(e.message||(e.target&&e.target.tagName)||'error');},true);</script>";
const char* kDoneProbe =
    "<script>window.addEventListener('load',function(){var b=document.body;"
    "if(window.reportErrors.length===0)b.setAttribute('data-report-ok','1');"
    "else b.setAttribute('data-report-errors',window.reportErrors.join('; '));});</script>";


// Legends need one distinct name per run: two runs of one recipe share [run] name.
std::vector<std::string> run_labels(const std::vector<RunData>& runs) {
  std::map<std::string, int> seen;
  for (const auto& r : runs) ++seen[r.name];
  std::vector<std::string> labels;
  for (const auto& r : runs) labels.push_back(seen[r.name] > 1 ? r.name + " (" + r.dir + ")" : r.name);
  return labels;
}

std::string notes_html(const RunData& run) {
  std::string h;
  for (const auto& n : run.notes) {
    const bool bad = n.find("NaN") != std::string::npos;
    h += "<p class=\"note" + std::string(bad ? " bad" : "") + "\">" + html_escape(n) + "</p>";
  }
  return h;
}

std::string run_section(const RunData& run, const std::string& label, size_t r, const Registries& registries,
                        size_t top) {
  const std::string n = std::to_string(r);
  std::string h =
      "<section class=\"run\" id=\"run-" + n + "\"><h2>" + html_escape(label) + "</h2>" + notes_html(run);
  h += "<div class=\"grid2\"><div><h3>Where and how it ran</h3>" + run_info_table(run) + "</div>";
  h += "<div><h3>Confusion matrix (validation)</h3>";
  h += run.confusion.empty()
           ? "<p class=\"muted\">not written yet: the run has not reached its final evaluation</p>"
           : confusion_html(run.confusion, "confusion-matrix-" + n);
  h += "</div></div>";
  h += "<h3>Worst validation predictions (highest loss)</h3>";
  if (run.predictions.empty()) {
    h += "<p class=\"muted\">no valid_predictions.csv: written at the run's final evaluation</p>";
  } else {
    h += top_losses_html(worst_predictions(run, registries, top), "top-losses-" + n);
  }
  if (!run.recipe_toml.empty())
    h += "<details><summary>Resolved recipe (recipe.resolved.toml)</summary><pre class=\"recipe\">" +
         html_escape(run.recipe_toml) + "</pre></details>";
  return h + "</section>";
}

std::filesystem::file_time_type recipe_mtime(const std::string& run_dir) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(run_dir + "/recipe.resolved.toml", ec);
  return ec ? std::filesystem::file_time_type::min() : t;
}

}  // namespace

std::string render_report(const ReportOptions& options, const Registries& registries) {
  if (options.run_dirs.empty())
    throw UserError("engine report: give at least one run directory, e.g. runs/<run.name>");
  std::vector<RunData> runs;
  for (const auto& d : options.run_dirs) runs.push_back(read_run_dir(d));
  const auto labels = run_labels(runs);
  std::string title;
  for (size_t i = 0; i < labels.size(); ++i) title += (i ? " vs " : "") + labels[i];

  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>engine report: " +
      html_escape(title) + "</title><style>" + kStyle + "</style>" + kErrorProbe + "</head><body>";
  h += "<header><h1>engine report: " + html_escape(title) + "</h1><p>written " + utc_now("%Y-%m-%d %H:%M UTC") + " by engine " +
       html_escape(engine_version()) + " (git " + html_escape(git_revision()) + ") from " +
       std::to_string(runs.size()) + " run director" + (runs.size() == 1 ? "y" : "ies") + "</p></header>";
  h += "<nav><a href=\"#overview-section\">overview</a><a href=\"#curves\">curves</a>";
  if (runs.size() > 1) h += "<a href=\"#recipe-differences\">recipe differences</a>";
  for (size_t r = 0; r < runs.size(); ++r)
    h += "<a href=\"#run-" + std::to_string(r) + "\">" + html_escape(labels[r]) + "</a>";
  h += "</nav><main>";

  h += "<section id=\"overview-section\"><h2>Overview</h2>";
  if (runs.size() > 1)
    for (size_t r = 0; r < runs.size(); ++r)
      if (!runs[r].notes.empty())
        h += "<p class=\"muted\">" + html_escape(labels[r]) + ": " + std::to_string(runs[r].notes.size()) +
             " note(s), see its section</p>";
  if (runs.size() == 1) h += notes_html(runs[0]);
  h += overview_table(runs, labels) + "</section>";

  h += "<section id=\"curves\"><h2>Curves</h2><div class=\"charts\">";
  for (const auto& chart : build_charts(runs, labels)) h += render_chart(chart);
  h += "</div></section>";

  if (runs.size() > 1)
    h += "<section id=\"recipe-differences\"><h2>Recipe differences</h2>" + recipe_diff_html(runs, labels) +
         "</section>";
  for (size_t r = 0; r < runs.size(); ++r) {
    RunData& run = runs[r];
    if (runs.size() == 1) run.notes.clear();  // already shown in the overview
    h += run_section(run, labels[r], r, registries, options.top_losses);
  }
  h += "</main><footer>engine report " + html_escape(engine_version()) + " · git " +
       html_escape(git_revision()) + " · report made on " + html_escape(describe_machine()) + "</footer>" +
       kDoneProbe + "</body></html>\n";
  return h;
}

std::string write_report(const ReportOptions& options, const Registries& registries) {
  std::string html = render_report(options, registries);
  const std::string out = options.output.empty() ? options.run_dirs.at(0) + "/report.html" : options.output;
  const auto parent = std::filesystem::path(out).parent_path();
  if (!parent.empty() && !std::filesystem::is_directory(parent))
    throw UserError(out + ": the directory " + parent.string() +
                    " does not exist (create it, or give -o another path)");
  write_file_atomic(out, html);
  return out;
}

ReportAtExit::ReportAtExit(const Registries& registries, std::string run_dir, const Accelerator& accelerator)
    : registries_(registries),
      run_dir_(std::move(run_dir)),
      accelerator_(accelerator),
      uncaught_at_start_(std::uncaught_exceptions()),
      recipe_written_(recipe_mtime(run_dir_)) {}

ReportAtExit::~ReportAtExit() {
  if (!accelerator_.is_main()) return;
  // A run that failed before it wrote its recipe (bad data, bad weights) has nothing to show, and
  // an older run in the same directory keeps its own report.
  const auto written = recipe_mtime(run_dir_);
  if (written == std::filesystem::file_time_type::min() || written == recipe_written_) return;
  const bool failed = std::uncaught_exceptions() > uncaught_at_start_;
  try {
    write_run_info(run_dir_, accelerator_,
                   preemption::requested() ? "preempted"
                   : failed                ? "failed"
                                           : "finished");
    ReportOptions options;
    options.run_dirs = {run_dir_};
    std::printf("  report: %s\n", write_report(options, registries_).c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "warning: the run's report could not be written (the run itself is unaffected): %s\n",
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "warning: the run's report could not be written (the run itself is unaffected)\n");
  }
}

}  // namespace engine::report
