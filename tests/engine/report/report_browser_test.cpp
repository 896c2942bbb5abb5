// The report of a short real run on the real MNIST digits, checked in headless Chromium the way a
// user looks at it: the page loads with no console error and no broken image, and its charts,
// confusion matrix and worst-prediction thumbnails are in the DOM. Then the runs a user debugs at
// 2 a.m.: killed mid-write, diverged to NaN, one epoch only, several compared, data moved away.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "tests/engine/report/browser.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;
namespace fs = std::filesystem;

namespace {

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Replaces the value of `key` in one JSON line with `raw` text: NaN and Infinity are not JSON, so
// nlohmann cannot write them, but Python's json.dumps does.
std::string with_raw_value(const std::string& line, const std::string& key, const std::string& raw) {
  const std::string k = "\"" + key + "\":";
  const auto at = line.find(k);
  REQUIRE_MESSAGE(at != std::string::npos, line);
  const auto end = line.find_first_of(",}", at + k.size());
  return line.substr(0, at + k.size()) + raw + line.substr(end);
}

// The run directory's files, without its checkpoints (a report never reads them).
std::string copy_run(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from))
    if (e.is_regular_file()) fs::copy_file(e.path(), to + "/" + e.path().filename().string());
  fs::remove(to + "/report.html");
  return to;
}

CommandResult report(const std::string& args) {
  return run_command("cd " + source_path("") + " && " + engine_binary() + " report " + args);
}

// Chromium's verdict on a report: loaded, no console message, no failed resource (the page's own
// probe sets data-report-ok only when no error event fired).
void check_renders(const RenderedPage& page, const std::string& what) {
  INFO(what);
  CHECK(page.exit_code == 0);
  CHECK_MESSAGE(console_messages(page.log).empty(), console_messages(page.log));
  CHECK_MESSAGE(contains(page.dom, "data-report-ok=\"1\""), page.dom.substr(0, 2000));
  CHECK(contains(page.dom, "id=\"overview\""));
  CHECK(contains(page.dom, "id=\"chart-loss-epoch\""));
}

}  // namespace

// The real run, once per process: doctest runs the test case's body again for each SUBCASE.
const CommandResult& real_run(const std::string& dir) {
  static const CommandResult result =
      run_command("cd " + source_path("") + " && " + engine_binary() +
                  " run tests/engine/report/report_run.toml --set run.output_dir=" + dir);
  return result;
}

TEST_CASE(
    "engine run writes a report a browser renders, and partial, NaN, one-epoch and compared runs render "
    "too") {
  mnist_file("train.csv");
  static const std::string tmp = temp_dir("report");
  const std::string run = tmp + "/run";
  const auto& res = real_run(run);
  REQUIRE_MESSAGE(res.exit_code == 0, res.output);
  CHECK_MESSAGE(contains(res.output, "report: " + run + "/report.html"), res.output);
  REQUIRE(fs::exists(run + "/report.html"));
  auto info = nlohmann::json::parse(read_text(run + "/run_info.json"));
  CHECK(info["status"] == "finished");
  CHECK(info["world_size"] == 1);
  CHECK(info["mixed_precision"] == "no");

  const bool browser = !chromium_binary().empty();
  if (!browser)
    MESSAGE("chromium is not installed (tools/test.sh installs it): the browser checks are skipped");

  SUBCASE("the finished run: charts, confusion matrix and thumbnails in the DOM, a screenshot") {
    const std::string html = read_text(run + "/report.html");
    CHECK(count(html, "data:image/png;base64,") == 16);  // --top's default
    CHECK_FALSE(contains(html, "http://cdn"));                // self-contained: nothing fetched
    CHECK_FALSE(contains(html, "<script src"));
    if (browser) {  // no early return: doctest finds the next SUBCASE only by reaching it
      const char* keep = std::getenv("ENGINE_REPORT_SCREENSHOT");  // e.g. docs/report.png
      const std::string png = keep ? std::string(keep) : tmp + "/report.png";
      auto page = render_page(run + "/report.html", png, 1700);
      check_renders(page, "finished run");
      for (const char* id :
           {"chart-loss-step", "chart-metric-accuracy", "chart-metric-error-rate", "chart-lr",
            "chart-throughput", "chart-wall-time", "confusion-matrix-0", "top-losses-0"})
        CHECK_MESSAGE(contains(page.dom, std::string("id=\"") + id + "\""), id);
      CHECK(count(page.dom, "<svg class=\"chart\"") >= 7);
      CHECK(count(page.dom, "<figure class=\"top-loss") == 16);
      CHECK(count(page.dom, "<img src=\"data:image/png;base64,") == 16);
      // 96 validation digits in the matrix, and the run's world size and precision in its panel.
      CHECK(contains(page.dom, "96 validation samples"));
      CHECK(contains(page.dom, "1 process"));
      const std::string shot = read_text(png);
      CHECK(shot.size() > 20000);
      CHECK(shot.rfind("\x89PNG", 0) == 0);
    }
  }

  SUBCASE("a run killed mid-write: no summary, no confusion matrix, a torn last line") {
    const std::string dir = copy_run(run, tmp + "/partial");
    for (const char* f : {"summary.json", "confusion_matrix.csv", "confusion_matrix.json",
                          "valid_predictions.csv", "run_info.json"})
      fs::remove(dir + "/" + f);
    std::string jsonl = read_text(dir + "/metrics.jsonl");
    write_text(dir + "/metrics.jsonl", jsonl.substr(0, jsonl.size() - 40));  // the last line cut short
    auto r = report(dir);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const std::string html = read_text(dir + "/report.html");
    CHECK(contains(html, "partial"));
    CHECK(contains(html, "the last line is incomplete"));
    CHECK(contains(html, "not recorded"));  // world size: no run_info.json yet
    if (browser) {                     // no early return: doctest finds the next SUBCASE only by reaching it
      auto page = render_page(dir + "/report.html");
      check_renders(page, "partial run");
      CHECK_FALSE(contains(page.dom, "id=\"confusion-matrix-0\""));
      CHECK(contains(page.dom, "id=\"chart-loss-step\""));  // the step lines before the cut still plot
    }
  }

  SUBCASE("a run whose losses went NaN (written as NaN by Python, as null by nlohmann)") {
    const std::string dir = copy_run(run, tmp + "/nan");
    std::string out;
    int epoch_lines = 0, step_lines = 0;
    for (auto l : lines_of(run + "/metrics.jsonl")) {
      auto j = nlohmann::json::parse(l);
      if (j["type"] == "epoch" && ++epoch_lines == 2) {
        j["valid/loss"] = nullptr;  // how nlohmann (the engine) writes a NaN
        l = with_raw_value(j.dump(), "train/loss", "NaN");
      } else if (j["type"] == "step" && ++step_lines >= 6) {
        l = with_raw_value(l, "train/loss", "Infinity");
      }
      out += l + "\n";
    }
    write_text(dir + "/metrics.jsonl", out);
    auto r = report(dir);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const std::string html = read_text(dir + "/report.html");
    CHECK(contains(html, "NaN/inf"));
    CHECK(count(html, "class=\"non-finite\"") >= 3);
    if (browser) {  // no early return: doctest finds the next SUBCASE only by reaching it
      check_renders(render_page(dir + "/report.html"), "NaN run");
    }
  }

  SUBCASE("a one-epoch run, and two runs compared: curves overlaid, recipe differences key by key") {
    const std::string one = copy_run(run, tmp + "/one_epoch");
    std::string out;
    for (const auto& l : lines_of(run + "/metrics.jsonl"))
      if (nlohmann::json::parse(l)["epoch"] == 1) out += l + "\n";
    write_text(one + "/metrics.jsonl", out);
    std::string recipe = read_text(one + "/recipe.resolved.toml");
    recipe.replace(recipe.find("epochs = 2"), 10, "epochs = 1");
    write_text(one + "/recipe.resolved.toml", recipe);
    auto r = report(one);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const std::string cmp = tmp + "/compare.html";
    auto c = report(run + " " + one + " -o " + cmp + " --top 4");
    REQUIRE_MESSAGE(c.exit_code == 0, c.output);
    const std::string html = read_text(cmp);
    CHECK(contains(html, "<code>train.epochs</code>"));
    CHECK(count(html, "data:image/png;base64,") == 8);  // 4 per run
    if (browser) {  // no early return: doctest finds the next SUBCASE only by reaching it
      auto single = render_page(one + "/report.html");
      check_renders(single, "one-epoch run");
      CHECK(contains(single.dom, "r=\"4\""));  // a lone point is drawn as a dot
      auto page = render_page(cmp);
      check_renders(page, "two runs");
      CHECK(contains(page.dom, "id=\"recipe-diff\""));
      CHECK(contains(page.dom, "id=\"confusion-matrix-1\""));
    }
  }

  SUBCASE("the run's data moved away: the report says so and still lists the worst predictions") {
    const std::string dir = copy_run(run, tmp + "/moved");
    std::string recipe = read_text(dir + "/recipe.resolved.toml");
    recipe.replace(recipe.find("data/mnist/train.csv"), 20, "data/mnist/gone.csv");
    write_text(dir + "/recipe.resolved.toml", recipe);
    auto r = report(dir);
    REQUIRE_MESSAGE(r.exit_code == 0, r.output);
    const std::string html = read_text(dir + "/report.html");
    CHECK(contains(html, "no images: the run&#39;s data could not be loaded again"));
    CHECK(contains(html, "gone.csv"));
    CHECK(count(html, "class=\"no-image\"") == 16);
  }
}

TEST_CASE("a run that diverges still leaves its report, marked failed, and still fails (exit 1)") {
  mnist_file("train.csv");
  const std::string run = temp_dir("report_failed") + "/run";
  auto r =
      run_command("cd " + source_path("") + " && " + engine_binary() +
                  " run tests/engine/report/report_run.toml --set optimizer.name=sgd --set optimizer.lr=1e6"
                  " --set run.output_dir=" +
                  run);
  CHECK_MESSAGE(r.exit_code == 1, r.output);
  CHECK_MESSAGE(contains(r.output, "the run diverged"), r.output);
  CHECK_MESSAGE(contains(r.output, "report: " + run + "/report.html"), r.output);
  CHECK(nlohmann::json::parse(read_text(run + "/run_info.json"))["status"] == "failed");
  const std::string html = read_text(run + "/report.html");
  CHECK(contains(html, "<span class=\"tag bad\">failed</span>"));
  CHECK(contains(html, "not written yet"));  // no confusion matrix: the final evaluation never ran
}

TEST_CASE("engine report on a directory that is not a run says what it expected (exit 2)") {
  const std::string dir = temp_dir("not_a_run");
  auto r = report(dir);
  CHECK(r.exit_code == 2);
  CHECK_MESSAGE(contains(r.output, dir + ": not a run directory (expected recipe.resolved.toml or metrics.jsonl"),
                r.output);
}
