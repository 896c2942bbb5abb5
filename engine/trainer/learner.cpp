#include "engine/trainer/learner.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "components/datasets/image_files.h"
#include "engine/core/blas_kernels.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/errors.h"
#include "engine/io/safetensors.h"
#include "engine/io/weights.h"
#include "engine/trainer/builder.h"

namespace engine {

namespace {
namespace fs = std::filesystem;
constexpr const char* kExportFormat = "1";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UserError(path + ": cannot read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Images handed over in memory, for Learner::predict(cv::Mat).
class MatDataset : public Dataset {
 public:
  MatDataset(const std::vector<cv::Mat>& images, int64_t classes) : images_(images), classes_(classes) {}
  size_t size() const override { return images_.size(); }
  Sample get(size_t i) const override { return {images_.at(i).clone(), -1}; }
  bool labeled() const override { return false; }
  int64_t num_classes() const override { return classes_; }
  std::string describe() const override { return std::to_string(images_.size()) + " images in memory"; }

 private:
  const std::vector<cv::Mat>& images_;
  int64_t classes_;
};

// Image files named on a command line, decoded and checked like a dataset's.
class FileListDataset : public ImageFilesDataset {
 public:
  FileListDataset(const std::vector<std::string>& paths, const std::string& mode) {
    std::vector<ImageFiles::File> files;
    for (const auto& p : paths) files.push_back({p, -1});
    ImageFilesOptions o;
    o.mode = mode;
    o.unreadable_hint = "give the path of a readable image file (" + image_extensions_text() + ")";
    set_files({}, ".", std::move(files), o, "predict");
  }
  bool labeled() const override { return false; }
  std::string describe() const override { return summary(false); }
};
}  // namespace

Learner::~Learner() = default;

std::unique_ptr<Learner> Learner::load(const std::string& path, const LearnerOptions& options) {
  select_blas_kernels();  // as engine's main() does, for programs that embed the engine (blas_kernels.h)
  check_onednn_convs();   // as Accelerator::create does, before the first convolution (onednn_convs.h)
  SafetensorsFile file = load_safetensors(path);
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end())
      throw UserError(path + ": not an exported model (no \"" + key +
                      "\" in its metadata); write one with `engine export RUN_DIR`");
    return it->second;
  };
  if (meta("engine.export") != kExportFormat)
    throw UserError(path + ": export format " + meta("engine.export") + ", this engine reads format " + kExportFormat);
  std::unique_ptr<Learner> l(new Learner());
  l->path_ = path;
  l->batch_size_ = options.batch_size;
  try {
    l->classes_ = nlohmann::json::parse(meta("classes")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": metadata \"classes\" is not a JSON list of names: " + e.what());
  }

  // The spec is validated like a recipe: a model or transform this engine no longer knows, or an
  // option it no longer accepts, is an error naming the export file.
  static const Registries reg = make_registries();
  auto doc = RecipeDocument::from_text(path + " (spec)", meta("spec"));
  Options root = doc->root();
  Options model = root.table("model", "");
  l->model_name_ = model.text("name", "", "");
  ModelRegistry::Factory make_model = reg.models.parse(model);
  Options data = root.table("data", "");
  std::vector<TransformRegistry::Factory> transforms;
  for (Options& t : data.tables("eval_transforms", "")) transforms.push_back(reg.transforms.parse(t));
  Options acc = root.table("accelerator", "");
  AcceleratorOptions acc_opts;
  acc_opts.mixed_precision = acc.choice("mixed_precision", "no", {"no", "bf16", "fp16"}, "");
  doc->finish();
  doc->diagnostics().throw_if_any();
  if (!options.mixed_precision.empty()) acc_opts.mixed_precision = options.mixed_precision;
  acc_opts.device = options.device;
  acc_opts.threads = options.threads;
  // Predicting on CUDA with the fp16 the run trained with is fine; fp16 on a CPU is not.
  if (acc_opts.mixed_precision == "fp16" && options.device == "cpu") acc_opts.mixed_precision = "no";

  l->model_ = make_model();
  if (static_cast<size_t>(l->model_->num_classes()) != l->classes_.size())
    throw UserError(path + ": " + std::to_string(l->classes_.size()) + " class names for a model with " +
                    std::to_string(l->model_->num_classes()) + " outputs");
  load_weights(*l->model_, file.tensors, path);
  l->transforms_ = build_transforms(transforms);
  l->acc_ = Accelerator::create(acc_opts, WorldInfo{});
  l->model_->to(l->acc_->device());
  l->evaluator_ = std::make_unique<Evaluator>(*l->acc_);
  return l;
}

std::unique_ptr<Learner> load_learner(const std::string& path, const LearnerOptions& options) {
  return Learner::load(path, options);
}

EvalResult Learner::predict(std::shared_ptr<const Dataset> data, size_t limit) {
  check_channels(*data, *model_, "the images");
  Loader loader(data, transforms_, LoaderOptions{batch_size_, 0, 1, true, 0});
  return evaluator_->run(*model_, loader, leading_indices(data->size(), limit), "predict", false);
}

EvalResult Learner::predict_files(const std::vector<std::string>& paths) {
  return predict(std::make_shared<FileListDataset>(paths, image_mode()));
}

Prediction Learner::row(const EvalResult& r, int64_t i) const {
  Prediction p;
  p.index = r.predictions[i].item<int64_t>();
  p.label = classes_.at(static_cast<size_t>(p.index));
  auto probs = r.probabilities[i].contiguous();
  p.probabilities.assign(probs.data_ptr<float>(), probs.data_ptr<float>() + probs.numel());
  return p;
}

std::vector<Prediction> Learner::predict(const std::vector<cv::Mat>& images) {
  EvalResult r = predict(std::make_shared<MatDataset>(images, model_->num_classes()));
  std::vector<Prediction> out;
  for (int64_t i = 0; i < r.predictions.size(0); ++i) out.push_back(row(r, i));
  return out;
}

Prediction Learner::predict(const cv::Mat& image) { return predict(std::vector<cv::Mat>{image}).at(0); }

std::string export_run(const std::string& run_dir, const std::string& out_path) {
  const std::string recipe = run_dir + "/recipe.resolved.toml", weights = run_dir + "/model.safetensors",
                    classes = run_dir + "/classes.json";
  for (const auto& f : {recipe, weights, classes})
    if (!fs::is_regular_file(f))
      throw UserError("engine export " + run_dir + ": " + f + " not found (is it the run directory of a finished `engine run`?)");
  SafetensorsFile w = load_safetensors(weights);
  const std::string resolved = read_text(recipe);
  std::map<std::string, std::string> meta;
  meta["engine.export"] = kExportFormat;
  meta["spec"] = toml_subset(resolved, {"model", "data.eval_transforms", "accelerator.mixed_precision"}, {"model.pretrained"});
  meta["classes"] = nlohmann::json::parse(read_text(classes)).dump();
  meta["recipe"] = resolved;
  if (auto it = w.metadata.find("model"); it != w.metadata.end()) meta["model"] = it->second;
  const std::string out = out_path.empty() ? run_dir + "/model.export.safetensors" : out_path;
  save_safetensors(out, w.tensors, meta);
  Learner::load(out);  // what was written must load: fail here, not on the user's first predict
  return out;
}

}  // namespace engine
