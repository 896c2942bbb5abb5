// engine predict FILE IMAGE... | --csv CSV [-o OUT]: inference with an exported model, no recipe.
// Per image, fastai's triple: decoded label, class index, probabilities.
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "components/datasets/digit_csv.h"
#include "engine/cli/commands.h"
#include "engine/core/errors.h"
#include "engine/trainer/learner.h"
#include "engine/trainer/prediction_writer.h"

namespace engine {

int cmd_predict(const PredictArgs& a) {
  if (a.images.empty() == a.csv.empty())
    throw UserError("engine predict: give image files, or --csv FILE (one of them)");
  LearnerOptions lo;
  lo.device = a.device;
  lo.threads = a.threads;
  lo.batch_size = a.batch_size;
  auto learner = load_learner(a.model, lo);
  const auto& classes = learner->class_names();
  const auto t0 = std::chrono::steady_clock::now();

  if (!a.csv.empty()) {
    DigitCsvOptions o;
    o.path = a.csv;
    o.labeled = false;
    o.num_classes = static_cast<int64_t>(classes.size());
    auto data = std::make_shared<DigitCsv>(o);
    EvalResult r = learner->predict(data);
    const std::string out = a.output.empty() ? "submission.csv" : a.output;
    write_predictions(out, r, *data, classes, SubmissionFormat{a.id_column, a.label_column, a.id_start});
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "predicted %lld rows of %s in %.2f s -> %s\n", static_cast<long long>(r.predictions.size(0)),
                 a.csv.c_str(), s, out.c_str());
    return 0;
  }

  EvalResult r = learner->predict_files(a.images);
  nlohmann::json all = nlohmann::json::array();
  for (int64_t i = 0; i < r.predictions.size(0); ++i) {
    Prediction p = learner->row(r, i);
    const std::string& file = a.images.at(static_cast<size_t>(r.indices[i].item<int64_t>()));
    if (a.json) {
      all.push_back({{"file", file}, {"label", p.label}, {"index", p.index}, {"probabilities", p.probabilities}});
      continue;
    }
    std::string probs;
    for (size_t c = 0; c < p.probabilities.size(); ++c) probs += fmt::format("{}{:.4f}", c ? ", " : "", p.probabilities[c]);
    std::printf("%s: ('%s', %lld, [%s])\n", file.c_str(), p.label.c_str(), static_cast<long long>(p.index), probs.c_str());
  }
  if (a.json) std::printf("%s\n", all.dump(2).c_str());
  return 0;
}

}  // namespace engine
