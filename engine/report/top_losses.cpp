#include "engine/report/top_losses.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "engine/core/errors.h"
#include "engine/recipe/diagnostics.h"
#include "engine/recipe/options.h"
#include "engine/trainer/registries.h"

namespace engine::report {

namespace {

// A NaN or infinite loss is the worst prediction of all: it sorts first.
bool worse(const PredictionRow& a, const PredictionRow& b) {
  const bool fa = std::isfinite(a.loss), fb = std::isfinite(b.loss);
  if (fa != fb) return !fa;
  if (!fa) return a.index < b.index;
  return a.loss > b.loss;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Only [data.dataset] is read: the rest of a resolved recipe need not load today (a key renamed
// since the run, fine_tune's resolved optimizer.lr) for its images to be found. Paths in it are
// relative to where the run was started, as in `engine run`.
std::unique_ptr<Dataset> rebuild_dataset(const std::string& recipe_path, const Registries& registries) {
  RecipeDocument doc(recipe_path, {});
  Options dataset = doc.root().table("data", "").table("dataset", "");
  auto factory = registries.datasets.parse(dataset);
  doc.diagnostics().throw_if_any();
  if (!factory) throw UserError(recipe_path + ": no [data] dataset");
  return factory();
}

}  // namespace

std::string encode_png(const cv::Mat& image, int max_side) {
  cv::Mat m = image;
  if (m.depth() != CV_8U) {
    // Float images (a dataset may return 0..1 or 0..255): scale by their own range convention.
    double lo = 0, hi = 0;
    cv::minMaxLoc(m.reshape(1), &lo, &hi);
    cv::Mat out;
    m.convertTo(out, CV_8U, hi <= 1.0 ? 255.0 : 1.0);
    m = out;
  }
  if (m.channels() == 3)
    cv::cvtColor(m, m, cv::COLOR_RGB2BGR);  // datasets hand out RGB, imencode wants BGR
  else if (m.channels() == 4)
    cv::cvtColor(m, m, cv::COLOR_RGBA2BGRA);
  else if (m.channels() != 1)
    cv::extractChannel(m, m, 0);
  const int side = std::max(m.rows, m.cols);
  if (side > max_side) {
    const double f = static_cast<double>(max_side) / side;
    cv::resize(m, m, cv::Size(), f, f, cv::INTER_AREA);
  }
  std::vector<uchar> bytes;
  if (!cv::imencode(".png", m, bytes)) throw std::runtime_error("OpenCV could not encode the image as PNG");
  return std::string(bytes.begin(), bytes.end());
}

WorstPredictions worst_predictions(const RunData& run, const Registries& registries, size_t count) {
  WorstPredictions out;
  std::vector<PredictionRow> rows;
  for (const auto& p : run.predictions)
    if (!p.label.empty()) rows.push_back(p);
  const size_t n = std::min(count, rows.size());
  std::partial_sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(n), rows.end(), worse);
  rows.resize(n);
  for (auto& r : rows) out.items.push_back(Thumbnail{std::move(r), {}});
  if (out.items.empty()) return out;

  const std::string recipe_path = run.dir + "/recipe.resolved.toml";
  if (!std::filesystem::exists(recipe_path)) {
    out.note = "no images: recipe.resolved.toml is missing, so the dataset cannot be rebuilt";
    return out;
  }
  std::unique_ptr<Dataset> data;
  try {
    data = rebuild_dataset(recipe_path, registries);
  } catch (const std::exception& e) {
    out.note = "no images: the run's data could not be loaded again (" + first_line(e.what()) +
               "). Run `engine report` from the directory the run was started in, with its data in place";
    return out;
  }
  size_t renamed = 0, failed = 0;
  for (auto& t : out.items) {
    const auto i = static_cast<size_t>(t.row.index);
    if (t.row.index < 0 || i >= data->size()) {
      ++failed;
      continue;
    }
    if (!t.row.name.empty() && data->sample_name(i) != t.row.name) ++renamed;
    try {
      t.png = encode_png(data->get(i).image, 128);
    } catch (const std::exception&) {
      ++failed;  // an unreadable file: listed without its image
    }
  }
  if (renamed > 0)
    out.note = std::to_string(renamed) +
               " sample name(s) differ from the run's: the data changed since the run, " +
               "some images may not be the samples that were evaluated";
  else if (failed > 0)
    out.note =
        std::to_string(failed) + " image(s) could not be read from the run's data (" + data->describe() + ")";
  return out;
}

}  // namespace engine::report
