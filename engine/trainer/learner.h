#pragma once
// An exported model and what it predicts: fastai's `learn.export()` / `load_learner(path)` /
// `learn.predict(img)`, for C++ callers and for `engine predict`.
//
// The export file is one safetensors file (timm-keyed weights, loadable by timm as it is) whose
// metadata holds everything else needed to predict with no recipe and no training data:
//   engine.export    format version ("1")
//   spec             TOML: the [model] table (without `pretrained`; its in_chans says how image
//                    files are decoded: 1 gray, 3 RGB), [[data.eval_transforms]] and
//                    [accelerator] mixed_precision of the run
//   classes          JSON array of class names, index = model output
//   recipe           the run's resolved recipe (provenance only; never read back)
// No optimizer state. Prediction goes through the same Evaluator as the run's own evaluation, so
// export -> predict reproduces the run's probabilities.
#include <opencv2/core.hpp>

#include <memory>
#include <string>
#include <vector>

#include "components/datasets/dataset.h"
#include "components/models/model.h"
#include "engine/accelerator/accelerator.h"
#include "engine/trainer/evaluator.h"
#include "engine/trainer/registries.h"

namespace engine {

/// fastai's predict triple.
struct Prediction {
  std::string label;                // decoded class name
  int64_t index = -1;               // class index
  std::vector<float> probabilities; // softmax over the classes
};

struct LearnerOptions {
  std::string device = "cpu";           // cpu | cuda | auto
  std::string mixed_precision = "";     // "" = as the run evaluated; no | bf16 | fp16
  int64_t threads = 0;                  // 0 = all cores
  int64_t batch_size = 64;
};

class Learner {
 public:
  /// Reads an export file; a file that is not one, or whose spec no longer validates, is a
  /// UserError naming it.
  static std::unique_ptr<Learner> load(const std::string& path, const LearnerOptions& options = {});
  ~Learner();

  /// One image as a dataset returns it: CV_8UC1 gray or CV_8UC3 RGB (cv::imread gives BGR:
  /// convert with cv::cvtColor(img, img, cv::COLOR_BGR2RGB)), any size the transforms accept.
  Prediction predict(const cv::Mat& image);
  std::vector<Prediction> predict(const std::vector<cv::Mat>& images);
  /// Every sample of a dataset (or the first `limit`), in order: probabilities and predictions.
  EvalResult predict(std::shared_ptr<const Dataset> data, size_t limit = 0);
  /// Image files decoded as the model expects (gray or RGB), then predict(dataset).
  EvalResult predict_files(const std::vector<std::string>& paths);

  const std::vector<std::string>& class_names() const { return classes_; }
  const std::string& model_name() const { return model_name_; }
  const std::string& path() const { return path_; }
  /// "gray" or "rgb": how image files are decoded for this model.
  std::string image_mode() const { return model_->in_chans() == 1 ? "gray" : "rgb"; }
  Model& model() { return *model_; }
  Prediction row(const EvalResult& r, int64_t i) const;

 private:
  Learner() = default;
  std::string path_, model_name_;
  std::vector<std::string> classes_;
  std::shared_ptr<Model> model_;
  std::vector<std::shared_ptr<const Transform>> transforms_;
  std::unique_ptr<Accelerator> acc_;
  std::unique_ptr<Evaluator> evaluator_;
  int64_t batch_size_ = 64;
};

/// fastai's name for Learner::load.
std::unique_ptr<Learner> load_learner(const std::string& path, const LearnerOptions& options = {});

/// `engine export RUN_DIR`: the run's kept weights (model.safetensors), model options, eval
/// transforms and class names in one file; returns the path written (default RUN_DIR/model.export.safetensors).
std::string export_run(const std::string& run_dir, const std::string& out_path = "");

}  // namespace engine
