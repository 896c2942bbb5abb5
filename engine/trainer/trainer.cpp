#include "engine/trainer/trainer.h"

#include <opencv2/core.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "engine/core/errors.h"
#include "engine/data/sampler.h"
#include "engine/io/atomic_file.h"
#include "engine/trainer/fit_context.h"
#include "engine/trainer/prediction_writer.h"

namespace engine {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<std::shared_ptr<const Transform>> build_all(const std::vector<TransformRegistry::Factory>& fs) {
  std::vector<std::shared_ptr<const Transform>> out;
  for (const auto& f : fs) out.push_back(f());
  return out;
}
int64_t eval_batch_size(const DataSection& d) { return d.eval_batch_size > 0 ? d.eval_batch_size : 2 * d.batch_size; }
}  // namespace

Trainer::Trainer(const Recipe& recipe, Accelerator& accelerator)
    : recipe_(recipe), acc_(accelerator), run_dir_(recipe.run_dir()), checkpointer_(run_dir_) {}

Trainer::~Trainer() = default;

void Trainer::print(const std::string& text) const {
  if (acc_.is_main()) std::cout << text << std::flush;
}

void Trainer::build() {
  cv::setNumThreads(1);  // loader threads parallelise over samples; OpenCV's own pool would oversubscribe
  torch::manual_seed(static_cast<uint64_t>(recipe_.run.seed));
  dataset_ = recipe_.data.dataset();
  if (!dataset_->labeled()) throw UserError("data.dataset must be labeled for training: " + dataset_->describe());
  split_ = make_split(dataset_->size(), recipe_.data.split);

  model_ = recipe_.model();
  acc_.prepare(*model_);
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (auto& p : model_->named_parameters())
    if (p.value().requires_grad()) named.emplace_back(p.key(), p.value()), params_.push_back(p.value());
  optimizer_ = recipe_.optimizer(decay_groups(named));
  for (size_t g = 0; g < optimizer_->param_groups().size(); ++g) base_lrs_.push_back(get_lr(*optimizer_, g));
  scheduler_ = recipe_.scheduler();
  for (const auto& m : recipe_.metrics) metrics_.push_back(m());
  for (const auto& c : recipe_.callbacks) callbacks_.push_back(c());

  const auto& d = recipe_.data;
  const uint64_t seed = static_cast<uint64_t>(recipe_.run.seed);
  train_loader_ = std::make_unique<Loader>(dataset_, build_all(d.train_transforms),
                                           LoaderOptions{d.batch_size, d.workers, d.prefetch, true, seed});
  valid_loader_ = std::make_unique<Loader>(dataset_, build_all(d.eval_transforms),
                                           LoaderOptions{eval_batch_size(d), d.workers, d.prefetch, true, seed});
  const int world = acc_.world().world_size;
  steps_per_epoch_ = train_steps_per_epoch(split_.train.size(), d.batch_size, world, d.drop_last);
  if (steps_per_epoch_ == 0)
    throw UserError("data.batch_size " + std::to_string(d.batch_size) + " x " + std::to_string(world) +
                    " processes exceeds the " + std::to_string(split_.train.size()) +
                    " training samples: no full batch (lower batch_size or set data.drop_last = false)");
  total_steps_ = steps_per_epoch_ * recipe_.train.epochs;
  if (recipe_.train.max_steps > 0) total_steps_ = std::min(total_steps_, recipe_.train.max_steps);

  int64_t n_params = 0;
  for (const auto& p : params_) n_params += p.numel();
  std::ostringstream s;
  s << "engine run " << recipe_.file << " -> " << run_dir_ << "\n"
    << "  accelerator: " << acc_.describe() << "\n"
    << "  data: " << dataset_->describe() << "; " << split_.train.size() << " train / " << split_.valid.size()
    << " valid\n"
    << "  batch: " << d.batch_size << " per process x " << world << " = " << d.batch_size * world << " global, "
    << steps_per_epoch_ << " steps/epoch, " << total_steps_ << " steps\n"
    << "  model: " << recipe_.model_name << ", " << n_params << " parameters\n";
  print(s.str());
}

void Trainer::apply_schedule() {
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    set_lr(*optimizer_, g, scheduler_->lr(state_.step, total_steps_, base_lrs_[g]));
  if (auto m = scheduler_->momentum(state_.step, total_steps_)) set_momentum(*optimizer_, *m);
}

void Trainer::train_epoch(int64_t epoch, FitContext& ctx, double& loss_sum, double& count) {
  const auto& d = recipe_.data;
  const int world = acc_.world().world_size;
  TrainShard shard = train_shard(split_.train, static_cast<uint64_t>(recipe_.run.seed), epoch, d.batch_size,
                                 acc_.world().rank, world, d.drop_last);
  train_loader_->start(std::move(shard.indices), epoch);
  model_->train();
  const auto t0 = Clock::now();
  auto ce = torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(recipe_.train.label_smoothing);
  Batch batch;
  for (int64_t b = 0; train_loader_->next(batch); ++b) {
    apply_schedule();
    torch::Tensor images = batch.images.to(acc_.device()), labels = batch.labels.to(acc_.device());
    torch::Tensor loss;
    {
      auto autocast = acc_.autocast();
      loss = torch::nn::functional::cross_entropy(model_->forward(images).to(torch::kFloat), labels, ce);
    }
    for (auto& p : params_)
      if (p.grad().defined()) p.mutable_grad().zero_();
    if (acc_.backward(loss, params_)) {
      if (recipe_.train.grad_clip_norm > 0) torch::nn::utils::clip_grad_norm_(params_, recipe_.train.grad_clip_norm);
      optimizer_->step();
      ++state_.step;
    } else {
      ++state_.skipped_steps;  // non-finite fp16 gradients: no update, the schedule does not advance
    }
    const int64_t n = images.size(0);
    const double batch_loss = loss.item<double>();  // one device sync per step
    loss_sum += batch_loss * n;
    count += n;
    state_.images_seen += n * world;
    StepLog log{epoch, b, steps_per_epoch_, batch_loss, get_lr(*optimizer_, 0), n * world, seconds_since(t0)};
    each_callback([&](Callback& cb) { cb.on_step_end(ctx, log); });
    if (recipe_.train.max_steps > 0 && state_.step >= recipe_.train.max_steps) {
      state_.stop = true;
      break;
    }
  }
}

void Trainer::fit() {
  const int world = acc_.world().world_size;
  FitContext ctx{recipe_.run.name, run_dir_, *model_, *optimizer_, acc_.scaler(), state_, checkpointer_,
                 recipe_.train.epochs, steps_per_epoch_, world, recipe_.data.batch_size};
  each_callback([&](Callback& cb) { cb.on_fit_begin(ctx); });
  for (int64_t epoch = state_.epoch; epoch < recipe_.train.epochs && !state_.stop; ++epoch) {
    each_callback([&](Callback& cb) { cb.on_epoch_begin(ctx); });
    const auto t0 = Clock::now();
    double loss_sum = 0, count = 0;
    train_epoch(epoch, ctx, loss_sum, count);
    auto sums = acc_.reduce_sum({loss_sum, count});
    const double train_seconds = seconds_since(t0);
    EvalResult ev = evaluate(*valid_loader_, split_.valid, "valid", true);

    EpochLog log;
    log.epoch = epoch + 1;
    log.values.emplace_back("train/loss", sums[1] > 0 ? sums[0] / sums[1] : NAN);
    log.values.insert(log.values.end(), ev.values.begin(), ev.values.end());
    log.values.emplace_back("lr", get_lr(*optimizer_, 0));
    log.values.emplace_back("step", static_cast<double>(state_.step));
    log.values.emplace_back("seconds", seconds_since(t0));
    log.values.emplace_back("images_per_s", sums[1] / train_seconds);
    state_.epoch = epoch + 1;
    each_callback([&](Callback& cb) { cb.on_epoch_end(ctx, log); });
  }
  each_callback([&](Callback& cb) { cb.on_fit_end(ctx); });
  if (state_.stop && state_.epoch < recipe_.train.epochs)
    print("stopped early after epoch " + std::to_string(state_.epoch) + " of " + std::to_string(recipe_.train.epochs) + "\n");
}

EvalResult Trainer::evaluate(Loader& loader, const std::vector<size_t>& indices, const std::string& prefix,
                             bool labeled) {
  loader.start(eval_shard(indices, acc_.world().rank, acc_.world().world_size), 0);
  model_->eval();
  torch::NoGradGuard no_grad;
  for (auto& m : metrics_) m->reset();
  double loss_sum = 0, count = 0;
  std::vector<torch::Tensor> preds;
  Batch batch;
  while (loader.next(batch)) {
    torch::Tensor logits;
    {
      auto autocast = acc_.autocast();
      logits = model_->forward(batch.images.to(acc_.device())).to(torch::kFloat).cpu();
    }
    preds.push_back(logits.argmax(1));
    if (!labeled) continue;
    loss_sum += torch::nn::functional::cross_entropy(
                    logits, batch.labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .item<double>();
    count += logits.size(0);
    for (auto& m : metrics_) m->update(logits, batch.labels);
  }
  EvalResult r;
  torch::Tensor local = preds.empty() ? torch::empty({0}, torch::kLong) : torch::cat(preds);
  r.predictions = acc_.gather_for_metrics(local);
  if (!labeled) return r;
  // One reduction for everything: loss sum, sample count, then each metric's sums.
  std::vector<double> sums{loss_sum, count};
  for (auto& m : metrics_) {
    auto s = m->sums();
    sums.insert(sums.end(), s.begin(), s.end());
  }
  sums = acc_.reduce_sum(sums);
  r.values.emplace_back(prefix + "/loss", sums[1] > 0 ? sums[0] / sums[1] : NAN);
  size_t at = 2;
  for (auto& m : metrics_) {
    size_t k = m->sums().size();
    m->set_sums({sums.begin() + at, sums.begin() + at + k});
    at += k;
    r.values.emplace_back(prefix + "/" + m->name(), m->compute());
  }
  return r;
}

std::vector<std::pair<std::string, double>> Trainer::predict() {
  const auto& p = recipe_.predict;
  std::shared_ptr<const Dataset> data = p.dataset();
  Loader loader(data, build_all(recipe_.data.eval_transforms),
                LoaderOptions{eval_batch_size(recipe_.data), recipe_.data.workers, recipe_.data.prefetch, true, 0});
  std::vector<size_t> all(p.limit > 0 ? std::min<size_t>(p.limit, data->size()) : data->size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  EvalResult r = evaluate(loader, all, "test", false);
  std::vector<std::pair<std::string, double>> out;
  if (!acc_.is_main()) return out;
  const std::string path = run_dir_ + "/" + p.output;
  write_predictions(path, r.predictions, p.id_column, p.label_column, p.id_start);
  print("  predictions: " + std::to_string(r.predictions.size(0)) + " rows -> " + path + "\n");
  if (!p.labels.empty()) {
    double acc = score_predictions(r.predictions, p.labels, p.id_start);
    out.emplace_back("test/accuracy", acc);
  }
  return out;
}

std::vector<std::pair<std::string, double>> Trainer::run() {
  if (acc_.is_main()) {
    std::filesystem::create_directories(run_dir_);
    write_file_atomic(run_dir_ + "/recipe.resolved.toml", recipe_.resolved_toml);
  }
  build();
  fit();

  // Reload the best weights everywhere: rank 0 reads the file, prepare() broadcasts them.
  bool has_best = acc_.is_main() && std::filesystem::exists(checkpointer_.best_path());
  has_best = acc_.reduce_sum({has_best ? 1.0 : 0.0})[0] > 0;
  if (has_best) {
    if (acc_.is_main()) Checkpointer::load_weights(checkpointer_.best_path(), *model_);
    acc_.prepare(*model_);
  }
  EvalResult final_eval = evaluate(*valid_loader_, split_.valid, "valid", true);
  std::vector<std::pair<std::string, double>> summary = final_eval.values;
  summary.emplace_back("epochs", static_cast<double>(state_.epoch));
  summary.emplace_back("steps", static_cast<double>(state_.step));
  if (has_best) summary.emplace_back("best_epoch", static_cast<double>(state_.best_epoch));
  if (recipe_.predict.enabled) {
    auto test = predict();
    summary.insert(summary.end(), test.begin(), test.end());
  }
  if (acc_.is_main()) {
    Checkpointer::save_weights(run_dir_ + "/model.safetensors", *model_,
                               {{"model", recipe_.model_name}, {"recipe", recipe_.file}});
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : summary) j[k] = v;
    write_file_atomic(run_dir_ + "/summary.json", j.dump(2) + "\n");
    std::ostringstream s;
    s << "done: " << (has_best ? "best epoch " + std::to_string(state_.best_epoch) + ", " : "");
    for (const auto& [k, v] : summary)
      if (k.find('/') != std::string::npos) s << k << " " << v << "  ";
    print(s.str() + "\n");
  }
  acc_.barrier();
  return summary;
}

}  // namespace engine
