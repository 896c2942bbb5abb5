// What the report reads from a run directory and how it draws it, without a browser: the log
// lines real writers produce (nlohmann's null for NaN, Python's bare NaN/Infinity), a run killed
// mid-line, a resumed run's repeated epochs, recipe differences, charts with non-finite values.
#include "engine/report/run_data.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/imgcodecs.hpp>

#include "engine/core/errors.h"
#include "engine/report/html.h"
#include "engine/report/recipe_diff.h"
#include "engine/report/svg_chart.h"
#include "engine/report/top_losses.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"

using namespace engine::report;
using namespace engine::test;


TEST_CASE(
    "metrics lines: NaN as null (nlohmann) or bare NaN/Infinity (Python), step lines told from epoch lines") {
  MetricRecord r;
  bool step = true;
  REQUIRE(parse_metrics_line(R"({"type":"epoch","epoch":3,"step":36.0,"train/loss":NaN,"valid/loss":null,)"
                             R"("lr":-Infinity,"valid/accuracy":0.5,"note":"NaN, Infinity"})",
                             r, step));
  CHECK_FALSE(step);
  CHECK(r.epoch == 3);
  CHECK(r.step == 36);
  CHECK(std::isnan(r.values.at("train/loss")));
  CHECK(std::isnan(r.values.at("valid/loss")));
  CHECK(r.values.at("lr") == -INFINITY);
  CHECK(r.values.at("valid/accuracy") == 0.5);
  CHECK(r.values.count("note") == 0);  // a string inside quotes is left alone, and is no value
  REQUIRE(parse_metrics_line(
      R"({"type":"step","epoch":1,"batch":4,"step":4,"train/loss":Infinity,"lr":0.001})", r, step));
  CHECK(step);
  CHECK(r.values.at("train/loss") == INFINITY);
  CHECK_FALSE(parse_metrics_line(R"({"type":"epoch","epoch":2,"train/lo)", r, step));
}

TEST_CASE("a run directory read back: a torn last line skipped, a resumed run's repeated epochs replaced") {
  const std::string dir = temp_dir("run_data");
  write_text(dir + "/recipe.resolved.toml", "[run]\nname = 'killed_run'\n");
  write_text(
      dir + "/metrics.jsonl",
      "{\"type\":\"epoch\",\"epoch\":1,\"step\":10,\"train/loss\":2.0,\"seconds\":3.0}\n"
      "{\"type\":\"epoch\",\"epoch\":2,\"step\":20,\"train/loss\":1.5,\"seconds\":3.0}\n"
      "{\"type\":\"epoch\",\"epoch\":2,\"step\":20,\"train/loss\":1.4,\"seconds\":4.0}\n"  // resumed after
                                                                                           // epoch 1
      "{\"type\":\"step\",\"epoch\":3,\"step\":22,\"train/lo");
  RunData run = read_run_dir(dir);
  CHECK(run.name == "killed_run");
  REQUIRE(run.epochs.size() == 2);
  CHECK(run.epochs[1].values.at("train/loss") == 1.4);
  CHECK(run.wall_seconds() == 7.0);
  CHECK(run.steps.empty());
  CHECK_FALSE(run.finished);
  CHECK(run.confusion.empty());
  std::string notes;
  for (const auto& n : run.notes) notes += n + "\n";
  CHECK(contains(notes, "the last line is incomplete"));
  CHECK(contains(notes, "no summary.json"));

  // The confusion matrix is counted from per-sample rows when no matrix file was written.
  write_text(dir + "/valid_predictions.csv",
             "index,name,label,prediction,probability,loss,p_a,p_b\n"
             "4,\"x,1.png\",a,a,0.9,0.1,0.9,0.1\n7,y.png,a,\"b\",0.8,1.6,0.2,0.8\n");
  run = read_run_dir(dir);
  REQUIRE(run.predictions.size() == 2);
  CHECK(run.predictions[0].name == "x,1.png");
  CHECK(run.predictions[1].true_probability == doctest::Approx(0.2));
  REQUIRE_FALSE(run.confusion.empty());
  CHECK(run.confusion.counts == std::vector<std::vector<double>>{{1, 1}, {0, 0}});
  CHECK_THROWS_AS(read_run_dir(temp_dir("empty_dir")), engine::UserError);
}

TEST_CASE("recipe differences: changed, added and reordered keys, arrays of tables by position") {
  const std::string a =
      "[optimizer]\nlr = 0.002\nname = 'adamw'\n[[data.train_transforms]]\nname = 'resize'\nsize = [40, "
      "40]\n";
  const std::string b =
      "[optimizer]\nlr = 0.001\nname = 'adamw'\nmomentum = 0.9\n[[data.train_transforms]]\nname = "
      "'resize'\nsize = [32, 32]\n";
  auto flat = flatten_toml(a);
  CHECK(flat.at("data.train_transforms[0].name") == "'resize'");
  CHECK(flat.at("data.train_transforms[0].size") == "[ 40, 40 ]");
  CHECK(flatten_toml("std = [0.30854]\nmax = 0.8\n").at("max") == "0.8");  // not 0.80000000000000004
  CHECK(flatten_toml("std = [0.30854]\n").at("std") == "[ 0.30854 ]");
  auto rows = recipe_differences({a, b});
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].key == "data.train_transforms[0].size");
  CHECK(rows[1].key == "optimizer.lr");
  CHECK(*rows[1].values[0] == "0.002");
  CHECK(rows[2].key == "optimizer.momentum");
  CHECK_FALSE(rows[2].values[0].has_value());
  CHECK(recipe_differences({a, a}).empty());
}

TEST_CASE(
    "charts: a lone point is a dot, NaN breaks the line with a red x, an exploding loss gets a log scale") {
  Chart c{"chart-test", "t", "epoch", "loss", true, {}};
  c.series.push_back(Series{"train/loss", {1}, {0.5}, 0, 0});
  std::string svg = render_chart(c);
  CHECK(contains(svg, "id=\"chart-test\""));
  CHECK(contains(svg, "r=\"4\""));
  c.series = {Series{"valid/loss", {1, 2, 3, 4}, {1.0, NAN, 0.8, INFINITY}, 1, 1}};
  svg = render_chart(c);
  CHECK(std::count(svg.begin(), svg.end(), 'M') >= 2);  // two pieces of line (one per finite run)
  CHECK(contains(svg, "valid/loss at epoch 2: NaN"));
  CHECK(contains(svg, "x = NaN/inf (2)"));
  CHECK_FALSE(contains(svg, "log scale"));
  c.series = {Series{"train/loss", {1, 2, 3, 4}, {2.3, 1.9, 1.8, 4e4}, 0, 0}};  // exploding
  CHECK(contains(render_chart(c), "(log scale)"));
  c.series = {Series{"lr", {1, 2, 3, 4}, {1e-3, 2e-3, 1e-3, 1e-8}, 0, 0}};  // one-cycle annealing to ~0
  CHECK_FALSE(contains(render_chart(c), "(log scale)"));
  c.series.clear();
  CHECK(contains(render_chart(c), "no data yet"));
}

TEST_CASE("images are embedded as PNG: RGB datasets shown in their own colours, big ones shrunk") {
  CHECK(base64("Man") == "TWFu");
  CHECK(base64("Ma") == "TWE=");
  CHECK(base64("M") == "TQ==");
  cv::Mat rgb(300, 200, CV_8UC3, cv::Scalar(255, 0, 0));  // pure red, in the datasets' RGB order
  const std::string png = encode_png(rgb, 128);
  cv::Mat back = cv::imdecode(std::vector<uchar>(png.begin(), png.end()), cv::IMREAD_COLOR);  // BGR
  REQUIRE_FALSE(back.empty());
  CHECK(back.rows == 128);
  CHECK(back.cols == 85);
  CHECK(back.at<cv::Vec3b>(10, 10) == cv::Vec3b(0, 0, 255));
  cv::Mat unit(28, 28, CV_32FC1, cv::Scalar(1.0f));  // a float image on the 0..1 scale
  const std::string gray = encode_png(unit, 128);
  back = cv::imdecode(std::vector<uchar>(gray.begin(), gray.end()), cv::IMREAD_GRAYSCALE);
  CHECK(back.at<uchar>(0, 0) == 255);
  CHECK(html_escape("<a href=\"x\">'&'</a>") == "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}
