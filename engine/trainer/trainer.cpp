#include "engine/trainer/trainer.h"

#include <torch/torch.h>

#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <optional>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "components/metrics/confusion_matrix.h"
#include "components/optimizers/optimizer.h"
#include "components/optimizers/shardable_step.h"
#include "engine/accelerator/grad_span.h"
#include "engine/core/blas_kernels.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/errors.h"
#include "engine/core/preemption.h"
#include "engine/core/rng.h"
#include "engine/core/sample_draws.h"
#include "engine/core/text.h"
#include "engine/data/sampler.h"
#include "engine/io/weights.h"
#include "engine/io/atomic_file.h"
#include "engine/trainer/fit_context.h"
#include "engine/trainer/model_ema.h"
#include "engine/trainer/prediction_writer.h"

namespace engine {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
}  // namespace

Trainer::Trainer(const Recipe& recipe, Accelerator& accelerator)
    : recipe_(recipe), acc_(accelerator), run_dir_(recipe.run_dir()), checkpointer_(run_dir_) {
  if (acc_.sync_batchnorm()) rank_sum_ = [this](torch::Tensor& t) { acc_.all_reduce_sum(t); };
}

Trainer::~Trainer() = default;

void Trainer::print(const std::string& text) const {
  if (acc_.is_main()) std::cout << text << std::flush;
}

double Trainer::head_lr() const {
  return get_lr(*parts_.optimizer, parts_.optimizer->param_groups().size() - 1);  // groups run stem .. head
}

void Trainer::apply_schedule(const Phase& phase, int64_t step_in_phase, int64_t phase_steps) {
  auto& opt = *parts_.optimizer;
  for (size_t g = 0; g < base_lrs_.size(); ++g) set_lr(opt, g, phase.scheduler->lr(step_in_phase, phase_steps, base_lrs_[g]));
  if (auto m = phase.scheduler->momentum(step_in_phase, phase_steps)) set_momentum(opt, *m);
}

void Trainer::train_epoch(const Phase& phase, int64_t phase_steps, int64_t epoch, FitContext& ctx) {
  const auto& d = recipe_.data;
  const int world = acc_.world().world_size;
  const int64_t k = recipe_.train.accumulate_steps;
  TrainShard shard = train_shard(parts_.split.train, static_cast<uint64_t>(recipe_.run.seed), epoch, d.batch_size,
                                 acc_.world().rank, world, d.drop_last);
  // A resumed epoch goes on after the micro-batches its checkpoint had consumed. The same batches
  // follow: batch j is the j-th chunk of the shard, and sample i of epoch e is augmented with
  // Rng(seed, e, i) whatever came before it.
  const int64_t first = state_.batches_done;
  const size_t skip = std::min(shard.indices.size(), static_cast<size_t>(first * d.batch_size));
  const int64_t position_first = shard.first, position_stride = shard.stride;
  shard.indices.erase(shard.indices.begin(), shard.indices.begin() + static_cast<std::ptrdiff_t>(skip));
  parts_.train_loader->start(std::move(shard.indices), epoch);
  Model& model = *parts_.model;
  model.train();
  const auto t0 = Clock::now();
  auto ce = torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(recipe_.train.label_smoothing);
  const auto& ck = recipe_.checkpoint;
  Batch batch;
  // Micro-batch b belongs to optimizer step b / k; gradients are summed locally over the k
  // micro-batches (loss / k each) and all-reduced once, on the last one.
  for (int64_t b = first; b < parts_.steps_per_epoch * k && parts_.train_loader->next(batch); ++b) {
    const int64_t micro = b % k;
    if (micro == 0) {
      apply_schedule(phase, state_.step - state_.phase_first_step, phase_steps);
      step_grads_.begin(trainable_);  // written by this step's first backward, not zeroed and added to
    }
    torch::Tensor images = batch.images.to(acc_.device()), labels = batch.labels.to(acc_.device());
    torch::Tensor loss;
    {
      // drop_path / dropout masks of micro-batch b, per sample of the global batch: the same on 1
      // rank or N, and after a resume.
      SampleDrawScope draws(Rng::mix(static_cast<uint64_t>(recipe_.run.seed), static_cast<uint64_t>(epoch),
                                     static_cast<uint64_t>(b)),
                            position_first, position_stride);
      // BatchNorm over the global batch (SyncBatchNorm) in a DDP job: the layout changes nothing.
      RankStatsScope batch_stats(rank_sum_ ? &rank_sum_ : nullptr);
      auto autocast = acc_.autocast();
      loss = torch::nn::functional::cross_entropy(model.forward(images).to(torch::kFloat), labels, ce);
    }
    const torch::Tensor scaled = k == 1 ? loss : loss / static_cast<double>(k);
    const int64_t n = images.size(0);
    const double batch_loss = loss.item<double>();  // one device sync per micro-batch
    // A non-finite loss in fp32/bf16 means the run diverged: every later step would train on
    // garbage, so stop here and say where. fp16's scaler skips such steps and lowers its scale.
    // A NaN's sign is noise (x86's default NaN is negative): "nan", never "-nan".
    if (!std::isfinite(batch_loss) && !acc_.scaler().enabled())
      throw RunError(fmt::format("training loss is {} at step {} (epoch {}, batch {} of {}), lr {:.6g}: the run diverged. "
                                 "Lower optimizer.lr, set train.grad_clip_norm, or check the data of this batch",
                                 std::isnan(batch_loss) ? "nan" : fmt::format("{}", batch_loss), state_.step + 1,
                                 epoch + 1, b / k + 1, parts_.steps_per_epoch, head_lr()));
    state_.epoch_loss_sum += batch_loss * n;
    state_.epoch_loss_count += n;
    state_.images_seen += n * world;
    state_.batches_done = b + 1;
    acc_.backward_local(scaled);
    if (micro == 0) step_grads_.end(trainable_);
    if (micro < k - 1) continue;
    const bool stepped = acc_.step(*parts_.optimizer, trainable_, recipe_.train.grad_clip_norm);
    if (stepped) {
      ++state_.step;
      if (ema_) ema_->update(model, state_.step);
    } else {
      ++state_.skipped_steps;  // non-finite fp16 gradients: no update, the schedule does not advance
    }
    // With several ranks, one small all-reduce per step: the progress bar shows the mean loss of
    // every rank, and a stop request (SIGTERM on any rank) is seen by all of them at the same step.
    double shown_loss = batch_loss;
    bool preempt = preemption::requested() != 0;
    if (world > 1) {
      auto sums = acc_.reduce_sum({batch_loss * n, static_cast<double>(n), preempt ? 1.0 : 0.0});
      shown_loss = sums[0] / sums[1];
      preempt = sums[2] > 0;
    }
    StepLog log{epoch, b / k, parts_.steps_per_epoch, shown_loss, head_lr(), n * k * world, seconds_since(t0)};
    each_callback([&](Callback& cb) { cb.on_step_end(ctx, log); });
    if (recipe_.train.max_steps > 0 && state_.step >= recipe_.train.max_steps) state_.stop = true;
    if (preempt) {
      const std::string path = save_checkpoint(true);
      const int sig = preemption::requested();
      std::string msg;
      if (acc_.is_main())
        msg = fmt::format("{} at step {} (epoch {}, batch {} of {}): checkpoint {} written.\n"
                          "to continue, run the same command with --resume {}",
                          sig == SIGINT ? "interrupted (SIGINT)" : sig == SIGTERM ? "preempted (SIGTERM)" : "stopped by a peer rank",
                          state_.step, epoch + 1, b / k + 1, parts_.steps_per_epoch, path, run_dir_);
      throw preemption::Preempted(msg);
    }
    if (stepped && ck.every_steps > 0 && state_.step % ck.every_steps == 0) save_checkpoint(false);
    if (state_.stop) break;
  }
}

Values Trainer::evaluate_epoch() {
  Model& model = *parts_.model;
  acc_.broadcast_buffers(model);  // BatchNorm statistics: rank 0's everywhere, as DDP's broadcast_buffers
  Values values = evaluator_->run(model, *parts_.valid_loader, parts_.split.valid, "valid", true).values;
  if (ema_) {
    auto ev = ema_->with_weights(model, [&] {
      acc_.broadcast_buffers(model);
      return evaluator_->run(model, *parts_.valid_loader, parts_.split.valid, "valid_ema", true).values;
    });
    values.insert(values.end(), ev.begin(), ev.end());
  }
  return values;
}

void Trainer::fit() {
  const int world = acc_.world().world_size;
  int64_t epochs = 0;
  for (const auto& ph : parts_.phases) epochs += ph.epochs;
  FitContext ctx{recipe_.run.name, run_dir_, *parts_.model, *parts_.optimizer, acc_.scaler(), state_, checkpointer_,
                 epochs, parts_.steps_per_epoch, world, recipe_.data.batch_size, ema_.get()};
  for (size_t i = 0; i < parts_.callbacks.size(); ++i) {
    auto it = resumed_callback_state_.find(i);
    auto& cb = *parts_.callbacks[i];
    if (it != resumed_callback_state_.end() && (!cb.main_process_only() || acc_.is_main())) cb.load_state(ctx, it->second);
  }
  each_callback([&](Callback& cb) { cb.on_fit_begin(ctx); });
  const auto& ck = recipe_.checkpoint;
  int64_t phase_first_epoch = 0;
  for (const auto& phase : parts_.phases) {
    if (state_.stop) break;
    const int64_t phase_end = phase_first_epoch + phase.epochs;
    if (state_.epoch >= phase_end) {  // finished before the checkpoint this run resumed from
      phase_first_epoch = phase_end;
      continue;
    }
    // A run resumed inside this phase keeps the schedule origin its checkpoint recorded (skipped
    // fp16 steps make it unknowable from epoch counts alone).
    if (state_.epoch == phase_first_epoch && state_.batches_done == 0) state_.phase_first_step = state_.step;
    int64_t phase_steps = parts_.steps_per_epoch * phase.epochs;
    if (recipe_.train.max_steps > 0)
      phase_steps = std::min(phase_steps, recipe_.train.max_steps - state_.phase_first_step);
    trainable_ = apply_freeze(*parts_.model, phase.frozen_stages);
    base_lrs_.clear();
    for (size_t g = 0; g < parts_.optimizer_lrs.size(); ++g)
      base_lrs_.push_back(phase.stage_lr.empty() ? parts_.optimizer_lrs[g] : phase.stage_lr[parts_.stage_of_group[g]]);
    if (phase.name != "train") {
      int64_t n = 0;
      for (const auto& p : trainable_) n += p.numel();
      print(fmt::format("phase {}: {} epoch{}, {} trainable parameters, peak lr {:.3g} (first stage) .. {:.3g} (head)\n",
                        phase.name, phase.epochs, phase.epochs == 1 ? "" : "s", n, base_lrs_.front(), base_lrs_.back()));
    }
    for (int64_t epoch = std::max(phase_first_epoch, state_.epoch); epoch < phase_end && !state_.stop; ++epoch) {
      each_callback([&](Callback& cb) { cb.on_epoch_begin(ctx); });
      const auto t0 = Clock::now();
      const int64_t first_step = state_.step;
      acc_.take_comm_seconds();
      train_epoch(phase, phase_steps, epoch, ctx);
      const double comm_seconds = acc_.take_comm_seconds();
      const int64_t steps = state_.step - first_step;
      auto sums = acc_.reduce_sum({state_.epoch_loss_sum, state_.epoch_loss_count});
      const double train_seconds = seconds_since(t0);
      EpochLog log;
      log.epoch = epoch + 1;
      log.values.emplace_back("train/loss", sums[1] > 0 ? sums[0] / sums[1] : NAN);
      const auto t_eval = Clock::now();
      auto ev = evaluate_epoch();
      const double eval_seconds = seconds_since(t_eval);
      log.values.insert(log.values.end(), ev.begin(), ev.end());
      log.values.emplace_back("lr", head_lr());
      log.values.emplace_back("step", static_cast<double>(state_.step));
      log.values.emplace_back("seconds", seconds_since(t0));
      log.values.emplace_back("images_per_s", sums[1] / train_seconds);
      // The validation pass (every rank's shard, gathers and metrics included; EMA weights count twice).
      const double evaluated = static_cast<double>(parts_.split.valid.size()) * (ema_ ? 2 : 1);
      if (evaluated > 0) log.values.emplace_back("eval_images_per_s", evaluated / eval_seconds);
      // DDP: the main rank's time per optimizer step in collectives (gradient all-reduce and the
      // step's loss/stop agreement), waits for the slower rank included; with the step split over
      // the ranks (Accelerator::step), its waits only, the gradient sums being part of the update.
      if (acc_.world().distributed() && steps > 0) log.values.emplace_back("comm_ms_per_step", 1000 * comm_seconds / steps);
      state_.epoch = epoch + 1;
      state_.batches_done = 0;
      state_.epoch_loss_sum = state_.epoch_loss_count = 0;
      // Files are written in order: a checkpoint still in flight (every_steps) finishes, or throws
      // its error, before the callbacks write theirs (best weights).
      writer_.wait();
      each_callback([&](Callback& cb) { cb.on_epoch_end(ctx, log); });
      if (ck.every_epochs > 0 && state_.epoch % ck.every_epochs == 0) save_checkpoint(false);
    }
    phase_first_epoch = phase_end;
  }
  each_callback([&](Callback& cb) { cb.on_fit_end(ctx); });
  if (state_.stop && state_.epoch < epochs)
    print("stopped early after epoch " + std::to_string(state_.epoch) + " of " + std::to_string(epochs) + "\n");
}

namespace {

// The default generator of `device`: its state is part of a rank's exact position (drop_path,
// dropout). Context::defaultGenerator works on LibTorch 1.13 and 2.x without CUDA headers.
at::Generator default_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device.is_cuda() ? device : torch::Device(torch::kCPU));
}

}  // namespace

namespace {
// A copy of `t` on the CPU that later steps do not change (contiguous: what the file holds).
torch::Tensor snapshot(const torch::Tensor& t) {
  if (!t.device().is_cpu()) return t.detach().to(torch::kCPU).contiguous();
  return torch::empty(t.sizes(), t.options().memory_format(torch::MemoryFormat::Contiguous)).copy_(t.detach());
}
}  // namespace

std::string Trainer::save_checkpoint(bool wait) {
  const int world = acc_.world().world_size;
  NamedTensors t;
  // Live tensors in their own dtype (no fp32 conversion): a resume continues bit for bit.
  for (auto& [k, v] : state_tensors(*parts_.model)) t.emplace_back("model/" + k, v);
  // After steps split over the ranks, each rank's moments are current in its own share only:
  // gathered first.
  if (auto* split = dynamic_cast<ShardableStep*>(parts_.optimizer.get())) split->gather_shares();
  for (auto& [k, v] : optimizer_state(*parts_.optimizer, StateCopy::live)) t.emplace_back("optimizer/" + k, v);
  if (ema_)
    for (auto& [k, v] : ema_->state()) t.emplace_back("ema/" + k, v);
  // What differs between ranks, gathered so that one file (rank 0's) holds every rank's share.
  auto loss = torch::tensor({state_.epoch_loss_sum, state_.epoch_loss_count}, torch::kDouble).unsqueeze(0);
  t.emplace_back("ranks/epoch_loss", acc_.gather_for_metrics(loss));
  t.emplace_back("ranks/rng_cpu", acc_.gather_for_metrics(default_generator(torch::kCPU).get_state().unsqueeze(0)));
  if (acc_.device().is_cuda())
    t.emplace_back("ranks/rng_device", acc_.gather_for_metrics(default_generator(acc_.device()).get_state().unsqueeze(0)));
  std::string path;
  if (acc_.is_main()) {
    auto meta = state_.to_metadata();
    meta["scaler.scale"] = exact_number(acc_.scaler().scale());
    meta["scaler.growth_tracker"] = std::to_string(acc_.scaler().growth_tracker());
    for (size_t g = 0; g < parts_.optimizer->param_groups().size(); ++g) meta["lr." + std::to_string(g)] = exact_number(get_lr(*parts_.optimizer, g));
    meta["world_size"] = std::to_string(world);
    meta["threads"] = std::to_string(at::get_num_threads());  // rounding depends on it (a resume's note)
    meta["recipe"] = recipe_.resolved_toml;
    meta["recipe_file"] = recipe_.file;
    for (size_t i = 0; i < parts_.callbacks.size(); ++i) {
      std::string st = parts_.callbacks[i]->state();
      if (!st.empty()) meta["callback." + std::to_string(i)] = st;
    }
    path = checkpointer_.resume_path(state_.step);
    // The write (checksum, file, fsync; ~0.1 s for convnext_atto's 40 MB, seconds on a slow disk)
    // runs beside the next steps, from a snapshot: the live tensors change at the next step. It
    // costs one copy of the checkpoint in memory while it is written.
    NamedTensors copy;
    copy.reserve(t.size());
    for (auto& [k, v] : t) copy.emplace_back(k, snapshot(v));
    writer_.submit([this, step = state_.step, copy = std::move(copy), meta = std::move(meta),
                    keep = recipe_.checkpoint.keep_last] { checkpointer_.save_resume(step, copy, meta, keep); });
    if (wait) writer_.wait();
  }
  // A stop (preemption) waits until the checkpoint is on disk: no rank exits before it.
  if (wait) acc_.barrier();
  return path;
}

void Trainer::restore(const ResumePoint& point) {
  const auto& f = point.file;
  NamedTensors model_t, ema_t;
  std::map<std::string, torch::Tensor> opt_t, ranks;
  for (const auto& [k, v] : f.tensors) {
    auto strip = [&, &k = k](const char* prefix) { return k.rfind(prefix, 0) == 0 ? k.substr(std::strlen(prefix)) : std::string(); };
    if (auto m = strip("model/"); !m.empty()) model_t.emplace_back(m, v);
    else if (auto o = strip("optimizer/"); !o.empty()) opt_t[o] = v;
    else if (auto e = strip("ema/"); !e.empty()) ema_t.emplace_back(e, v);
    else if (auto r = strip("ranks/"); !r.empty()) ranks[r] = v;
  }
  load_weights(*parts_.model, model_t, point.path);
  load_optimizer_state(*parts_.optimizer, opt_t);
  if (ema_) ema_->load_state(ema_t);
  auto meta = [&](const std::string& key) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw UserError(point.path + ": resume checkpoint without \"" + key + "\" in its metadata");
    return it->second;
  };
  state_ = TrainState::from_metadata(f.metadata);
  acc_.scaler().set_state(std::stod(meta("scaler.scale")), std::stoll(meta("scaler.growth_tracker")));
  for (size_t g = 0; g < parts_.optimizer->param_groups().size(); ++g)
    set_lr(*parts_.optimizer, g, std::stod(meta("lr." + std::to_string(g))));
  const int64_t r = acc_.world().rank;
  auto row = [&](const std::string& key) {
    auto it = ranks.find(key);
    if (it == ranks.end() || it->second.size(0) <= r) throw UserError(point.path + ": no ranks/" + key + " for rank " + std::to_string(r));
    return it->second[r];
  };
  auto loss = row("epoch_loss");
  state_.epoch_loss_sum = loss[0].item<double>();
  state_.epoch_loss_count = loss[1].item<double>();
  default_generator(torch::kCPU).set_state(row("rng_cpu").contiguous());
  if (acc_.device().is_cuda() && ranks.count("rng_device"))
    default_generator(acc_.device()).set_state(row("rng_device").contiguous());
  for (const auto& [k, v] : f.metadata)
    if (k.rfind("callback.", 0) == 0) resumed_callback_state_[std::stoul(k.substr(9))] = v;
}

Values Trainer::predict() {
  const auto& p = recipe_.predict;
  std::shared_ptr<const Dataset> data = p.dataset();
  check_channels(*data, *parts_.model, "predict.dataset");
  const auto& d = recipe_.data;
  Loader loader(data, build_transforms(d.eval_transforms), LoaderOptions{eval_batch_size(d), d.workers, d.prefetch, true, 0});
  EvalResult r = evaluator_->run(*parts_.model, loader, leading_indices(data->size(), p.limit), "test", false);
  Values out;
  if (!acc_.is_main()) return out;
  const std::string path = run_dir_ + "/" + p.output;
  write_predictions(path, r, *data, parts_.dataset->class_names(), SubmissionFormat{p.id_column, p.label_column, p.id_start});
  print("  predictions: " + std::to_string(r.predictions.size(0)) + " rows -> " + path + "\n");
  if (!p.labels.empty()) out.emplace_back("test/accuracy", score_predictions(r.predictions, p.labels, p.id_start));
  return out;
}

void Trainer::write_outputs(const EvalResult& final_eval, const Values& summary, bool has_best) {
  const auto classes = parts_.dataset->class_names();
  nlohmann::json names = classes;
  write_file_atomic(run_dir_ + "/classes.json", names.dump() + "\n");
  ConfusionMatrix cm(static_cast<int64_t>(classes.size()));
  cm.update(final_eval.predictions, final_eval.labels);
  cm.write(run_dir_ + "/confusion_matrix.csv", classes);
  write_eval_rows(run_dir_ + "/valid_predictions.csv", final_eval, *parts_.dataset, classes);
  Checkpointer::save_weights(run_dir_ + "/model.safetensors", *parts_.model,
                             {{"model", recipe_.model_name}, {"recipe", recipe_.file}});
  if (ema_)
    ema_->with_weights(*parts_.model, [&] {
      Checkpointer::save_weights(run_dir_ + "/model_ema.safetensors", *parts_.model, {{"model", recipe_.model_name}});
    });
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : summary) j[k] = v;
  write_file_atomic(run_dir_ + "/summary.json", j.dump(2) + "\n");
  std::ostringstream s;
  s << "done: " << (has_best ? "best epoch " + std::to_string(state_.best_epoch) + ", " : "");
  for (const auto& [k, v] : summary)
    if (k.find('/') != std::string::npos) s << k << " " << v << "  ";
  print(s.str() + "\n");
}

Values Trainer::run() {
  // Which checkpoint, and may this recipe continue it: refused before anything is built or written.
  std::optional<ResumePoint> point = find_resume_point(resume_request_, run_dir_);
  std::vector<std::string> changed;
  if (point) {
    changed = check_resumable(*point, recipe_.resolved_toml, acc_.world().world_size);
    run_dir_ = point->run_dir;
    checkpointer_ = Checkpointer(run_dir_);
  } else if (resume_request_.requested) {
    print("--resume: " + run_dir_ + " has no checkpoint yet; starting from the beginning\n");
  }
  parts_ = build_run(recipe_, acc_);  // bad data or weights fail here, before the run directory exists
  if (recipe_.train.ema.enabled)
    ema_ = std::make_unique<ModelEma>(*parts_.model, recipe_.train.ema.decay, recipe_.train.ema.warmup);
  if (point) {
    restore(*point);
    std::string s;
    for (const auto& skipped : point->skipped) s += "  skipped " + skipped + "\n";
    s += fmt::format("resuming {} from {}: after epoch {}, step {}", run_dir_, point->path, state_.epoch, state_.step);
    if (state_.batches_done > 0) s += fmt::format(" (batch {} of epoch {})", state_.batches_done / recipe_.train.accumulate_steps, state_.epoch + 1);
    s += "\n";
    for (const auto& c : changed) s += "  changed since the checkpoint: " + c + "\n";
    s += thread_count_note(*point, at::get_num_threads());
    print(s);
  }
  if (acc_.is_main()) {
    std::filesystem::create_directories(run_dir_);
    write_file_atomic(run_dir_ + "/recipe.resolved.toml", recipe_.resolved_toml);
  }
  evaluator_ = std::make_unique<Evaluator>(acc_, build_metrics(recipe_));
  if (acc_.is_main()) {  // the run header: only the main process prints (precision_note times GEMMs for it)
    int64_t total_steps = 0;
    for (const auto& ph : parts_.phases) total_steps += parts_.steps_per_epoch * ph.epochs;
    if (recipe_.train.max_steps > 0) total_steps = std::min(total_steps, recipe_.train.max_steps);
    const auto& d = recipe_.data;
    const int world = acc_.world().world_size;
    int64_t n_params = 0;
    for (const auto& p : parts_.model->parameters()) n_params += p.numel();
    std::ostringstream s;
    s << "engine run " << recipe_.file << " -> " << run_dir_ << "\n"
      << "  accelerator: " << acc_.describe() << "\n";
    if (const std::string note = acc_.precision_note(); !note.empty()) s << "  note: " << note << "\n";
    if (const std::string note = blas_kernels_note(); !note.empty()) s << "  note: " << note << "\n";
    if (const std::string note = onednn_convs_note(); !note.empty()) s << "  note: " << note << "\n";
    s << "  data: " << parts_.dataset->describe() << "; " << parts_.split.train.size() << " train / "
      << parts_.split.valid.size() << " valid\n"
      << "  batch: " << d.batch_size << " per process x " << world;
    if (recipe_.train.accumulate_steps > 1) s << " x " << recipe_.train.accumulate_steps << " accumulated";
    s << " = " << d.batch_size * world * recipe_.train.accumulate_steps << " global, " << parts_.steps_per_epoch
      << " steps/epoch, " << total_steps << " steps\n"
      << "  model: " << recipe_.model_name << ", " << n_params << " parameters\n";
    if (!parts_.model->pretrained_note().empty()) s << "  " << parts_.model->pretrained_note() << "\n";
    print(s.str());
  }
  fit();
  // A stop requested after the last step (during the last evaluation): the fit is complete, so
  // checkpoint it and leave the final evaluation and prediction to the resumed run, instead of
  // outliving the scheduler's grace period.
  writer_.wait();  // the last checkpoint is on disk (or its write error is thrown) before the end
  if (acc_.reduce_sum({preemption::requested() ? 1.0 : 0.0})[0] > 0) {
    const std::string path = save_checkpoint(true);
    throw preemption::Preempted(acc_.is_main() ? fmt::format("stopped after training (step {}): checkpoint {} written.\n"
                                                             "to continue, run the same command with --resume {}",
                                                             state_.step, path, run_dir_)
                                               : "");
  }

  // Reload the best weights everywhere: rank 0 reads the file, prepare() broadcasts them. Only a
  // file this run (or the run it resumes) wrote: a best.safetensors left in the directory by an
  // earlier run is not this run's model (a new run that trains no epoch evaluates its own weights).
  bool has_best = acc_.is_main() && state_.best_epoch >= 0 && std::filesystem::exists(checkpointer_.best_path());
  has_best = acc_.reduce_sum({has_best ? 1.0 : 0.0})[0] > 0;
  if (has_best) {
    if (acc_.is_main()) Checkpointer::load_weights(checkpointer_.best_path(), *parts_.model);
    acc_.prepare(*parts_.model);
  }
  acc_.broadcast_buffers(*parts_.model);
  EvalResult final_eval = evaluator_->run(*parts_.model, *parts_.valid_loader, parts_.split.valid, "valid", true);
  Values summary = final_eval.values;
  summary.emplace_back("epochs", static_cast<double>(state_.epoch));
  summary.emplace_back("steps", static_cast<double>(state_.step));
  if (has_best) summary.emplace_back("best_epoch", static_cast<double>(state_.best_epoch));
  if (recipe_.predict.enabled) {
    auto test = predict();
    summary.insert(summary.end(), test.begin(), test.end());
  }
  if (acc_.is_main()) write_outputs(final_eval, summary, has_best);
  acc_.barrier();
  return summary;
}

}  // namespace engine
