#include "engine/trainer/recipe.h"

#include <algorithm>

#include "engine/core/errors.h"
#include "engine/core/text.h"

namespace engine {

std::string Recipe::run_dir() const {
  std::string dir = run.output_dir;
  for (size_t at; (at = dir.find("{name}")) != std::string::npos;) dir.replace(at, 6, run.name);
  return dir;
}

namespace {

template <class R>
std::vector<typename R::Factory> parse_list(Options& parent, const char* key, const char* doc, const R& registry) {
  std::vector<typename R::Factory> out;
  for (Options& t : parent.tables(key, doc)) out.push_back(registry.parse(t));
  return out;
}

void read_run(Options root, Recipe& r) {
  Options o = root.table("run", "what the run is called and where it writes");
  r.run.name = o.text("name", r.run.name, "run name; used in output_dir");
  r.run.seed = o.integer("seed", r.run.seed, "seed of weights init, shuffling and augmentation");
  r.run.output_dir = o.text("output_dir", r.run.output_dir, "run directory; {name} is replaced by run.name");
}

void read_data(Options root, Recipe& r, const Registries& reg) {
  Options o = root.table("data", "dataset, split, loader and transforms");
  Options ds = o.table("dataset", "the labeled dataset: { name = \"digit_csv\", path = ... }");
  if (!o.describing() && !o.has("dataset")) o.error("dataset", "missing [data] dataset", "e.g. dataset = { name = \"digit_csv\", path = \"data/mnist/train.csv\" }");
  else r.data.dataset = reg.datasets.parse(ds);
  Options split = o.table("split", "train/valid split");
  r.data.split = SplitOptions::read(split);
  r.data.batch_size = o.integer("batch_size", r.data.batch_size, "per process; the global batch is batch_size x world size", 1);
  r.data.eval_batch_size = o.integer("eval_batch_size", r.data.eval_batch_size, "per process; 0 = 2 x batch_size", 0);
  r.data.workers = o.integer("workers", r.data.workers, "loader threads (0 = load on the training thread)", 0, 64);
  r.data.prefetch = o.integer("prefetch", r.data.prefetch, "batches prepared ahead", 1, 256);
  r.data.drop_last = o.flag("drop_last", r.data.drop_last, "drop the last incomplete global batch of each epoch");
  r.data.train_transforms = parse_list(o, "train_transforms", "transforms applied to training samples, in order", reg.transforms);
  r.data.eval_transforms = parse_list(o, "eval_transforms", "transforms applied for validation and prediction, in order", reg.transforms);
}

void read_train(Options root, Recipe& r, const Registries& reg) {
  Options o = root.table("train", "the loop");
  r.train.epochs = o.integer("epochs", r.train.epochs, "passes over the training split (0 = only evaluate and predict, e.g. with model.pretrained)", 0);
  r.train.metrics = o.texts("metrics", r.train.metrics, "validation metrics (see `engine list metrics`)");
  r.train.label_smoothing = o.number("label_smoothing", r.train.label_smoothing, "cross-entropy label smoothing", 0, 1);
  r.train.grad_clip_norm = o.number("grad_clip_norm", r.train.grad_clip_norm, "clip the global gradient norm (0 = off)", 0);
  r.train.max_steps = o.integer("max_steps", r.train.max_steps, "stop after this many optimizer steps (0 = no limit)", 0);
  r.train.accumulate_steps = o.integer("accumulate_steps", r.train.accumulate_steps,
                                       "micro-batches per optimizer step: global batch = batch_size x processes x this", 1, 1 << 16);
  if (o.describing() || o.has("fine_tune")) {
    Options ft = o.table("fine_tune", "fastai's fine_tune: `epochs` frozen-body epochs first, then `train.epochs` unfrozen with discriminative lrs");
    r.train.fine_tune = FineTuneOptions::read(ft);
    if (o.describing()) r.train.fine_tune.enabled = false;
  }
  if (o.describing() || o.has("ema")) {
    Options e = o.table("ema", "timm ModelEmaV2 weights, evaluated as valid_ema/* and saved as model_ema.safetensors");
    r.train.ema.enabled = e.flag("enabled", true, "keep an exponential moving average of the weights");
    r.train.ema.decay = e.number("decay", r.train.ema.decay, "ema = decay * ema + (1 - decay) * weights, every optimizer step", 0, 1);
    r.train.ema.warmup = e.flag("warmup", r.train.ema.warmup, "decay = min(decay, (1 + step) / (10 + step)) (timm ModelEmaV3)");
  }
  for (const auto& m : r.train.metrics) {
    const auto* e = reg.metrics.find(m);
    if (!e) {
      o.error("metrics", "unknown metric \"" + m + "\"", did_you_mean(m, reg.metrics.names()));
      continue;
    }
    Options defaults = Options::describe(nullptr);
    r.metrics.push_back(e->parse(defaults));
  }
}

void read_predict(Options root, Recipe& r, const Registries& reg) {
  if (!root.describing() && !root.has("predict")) return;
  Options o = root.table("predict", "optional: unlabeled data -> submission file");
  r.predict.enabled = true;
  Options ds = o.table("dataset", "the unlabeled dataset, e.g. { name = \"digit_csv\", path = ..., labeled = false }");
  if (!o.describing() && !o.has("dataset")) o.error("dataset", "missing [predict] dataset");
  else r.predict.dataset = reg.datasets.parse(ds);
  r.predict.output = o.text("output", r.predict.output, "file written in the run directory");
  r.predict.id_column = o.text("id_column", r.predict.id_column, "header of the id column");
  r.predict.label_column = o.text("label_column", r.predict.label_column, "header of the predicted label column");
  r.predict.id_start = o.integer("id_start", r.predict.id_start, "id of the first row (Kaggle: 1)");
  r.predict.limit = o.integer("limit", 0, "predict only the first N rows (0 = all)", 0);
  r.predict.labels = o.text("labels", "", "optional id,label file to score the predictions against (test/accuracy)");
  if (!r.predict.labels.empty()) o.existing_file("labels", "", "");
}

// The values of every epoch's log, which callbacks can monitor.
std::vector<std::string> epoch_results(const Recipe& r) {
  std::vector<std::string> k{"train/loss", "valid/loss"};
  for (const auto& m : r.train.metrics) k.push_back("valid/" + m);
  if (r.train.ema.enabled) {
    k.push_back("valid_ema/loss");
    for (const auto& m : r.train.metrics) k.push_back("valid_ema/" + m);
  }
  return k;
}

// The values [expect] can bound: the run's summary (summary.json), i.e. the kept weights' final
// evaluation, the epoch and step counts, and the score of the predictions. Epoch-only values
// (train/loss, valid_ema/*) are in metrics.jsonl, not in the summary.
std::vector<std::string> known_results(const Recipe& r) {
  std::vector<std::string> k{"valid/loss"};
  for (const auto& m : r.train.metrics) k.push_back("valid/" + m);
  k.insert(k.end(), {"epochs", "steps"});
  if (!r.predict.labels.empty()) k.push_back("test/accuracy");
  return k;
}

// A callback monitoring a value the run never produces would read nothing every epoch
// (early_stopping would stop after `patience` epochs, checkpoint_best would fail after the
// first): report it now, at the callback's `monitor` key, with the nearest produced value.
// Runs after every section is read, since the produced values depend on [train] and [predict].
void check_monitors(std::vector<Options>& tables, const std::vector<CallbackRegistry::Factory>& callbacks,
                    const Recipe& r) {
  const auto known = epoch_results(r);
  for (size_t i = 0; i < tables.size() && i < callbacks.size(); ++i) {
    if (!callbacks[i]) continue;  // unknown callback name: already reported
    const std::string key = callbacks[i]()->monitored();
    if (key.empty() || std::find(known.begin(), known.end(), key) != known.end()) continue;
    Options& t = tables[i];
    const std::string name = t.text("name", "", "");
    std::string hint = did_you_mean(key, known, "this run's values per epoch: ");
    if (key == "test/accuracy") hint = "test/accuracy is measured once after training, not per epoch; " + hint;
    const bool given = t.has("monitor");
    if (!given) hint = "set monitor = \"...\"; " + hint;
    t.error("monitor", name + ": monitors \"" + key + "\"" + (given ? "" : " (its default)") + ", which this run does not produce",
            hint);
  }
}

// A resolved recipe (recipe.resolved.toml) spells out every default, the optimizer's lr included:
// with fine_tune that lr is unused, and the default one must not make the run's own resolved recipe
// invalid. Any other value is still an error.
bool is_default_lr(Options& opt, const Registries& reg) {
  const auto* e = reg.optimizers.find(opt.text("name", "", ""));
  if (!e) return false;
  std::vector<OptionDoc> docs;
  Options d = Options::describe(&docs);
  e->parse(d);
  for (const auto& doc : docs)
    if (doc.key == "lr") return std::stod(doc.default_value) == opt.number("lr", 0, "");
  return false;
}

void read_expect(Options root, Recipe& r) {
  if (!root.describing() && !root.has("expect")) return;
  Options o = root.table("expect", "bounds `engine test` checks, one per value the run reports: \"valid/accuracy\" = { min = 0.97 }");
  auto known = known_results(r);
  // Describing, one placeholder entry documents the keys every bound takes.
  for (const auto& key : o.describing() ? std::vector<std::string>{"\"<value>\""} : o.keys()) {
    Options b = o.table(key, "a value of the run's summary.json (valid/loss, valid/<metric>, test/accuracy, epochs, steps)");
    Bound bound = Bound::read(b);
    bool ok = false;
    for (const auto& k : known) ok = ok || k == key;
    if (!ok) {
      const auto per_epoch = epoch_results(r);
      const bool epoch_only = std::find(per_epoch.begin(), per_epoch.end(), key) != per_epoch.end();
      o.error(key, "this run reports no \"" + key + "\"" + (epoch_only ? " in its summary" : ""),
              (epoch_only ? key + " is logged per epoch (metrics.jsonl), not in summary.json; " : std::string()) +
                  did_you_mean(key, known, "summary values: "));
    }
    r.expect[key] = bound;
  }
}

// Every section, read into `r`. The same code documents the recipe (`engine list recipe`): run on
// a describing root, each reader records its keys' types, defaults and docs instead.
void read_sections(Options root, Recipe& r, const Registries& reg) {
  root.text("base", "", "recipe this one inherits (one level); its values are overridden by this file");
  read_run(root, r);
  Options acc = root.table("accelerator", "devices, processes, precision");
  r.accelerator = AcceleratorOptions::read(acc);
  read_data(root, r, reg);
  Options model = root.table("model", "the network: { name = \"convnext_atto\", ... }");
  r.model_name = model.text("name", "", "");
  r.model = reg.models.parse(model);
  Options opt = root.table("optimizer", "{ name = \"adamw\", lr = ..., ... } (see `engine list optimizers`)");
  r.optimizer = reg.optimizers.parse(opt);
  Options sched = root.table("scheduler", "learning-rate schedule (see `engine list schedulers`); none = a constant lr");
  read_train(root, r, reg);
  if (r.train.fine_tune.enabled) {
    // fine_tune brings fastai's two one-cycle schedules and its own learning rates: a scheduler
    // or an optimizer lr beside it would be silently ignored, so they are errors.
    if (sched.has("name"))
      sched.error("name", "[scheduler] is not used with train.fine_tune (it runs fastai's one-cycle schedules)",
                  "remove [scheduler], or remove train.fine_tune");
    if (opt.has("lr") && !is_default_lr(opt, reg))
      opt.error("lr", "optimizer.lr is not used with train.fine_tune", "set train.fine_tune.base_lr instead");
  }
  if (!sched.describing() && !sched.has("name")) {  // default: a constant learning rate
    const auto* e = reg.schedulers.find("constant");
    if (e) r.scheduler = e->parse(sched);
  } else {
    r.scheduler = reg.schedulers.parse(sched);
  }
  std::vector<std::string> listed;
  std::vector<Options> callback_tables = root.tables("callbacks", "callbacks (see `engine list callbacks`); progress_bar and metrics_logger are always on");
  for (Options& t : callback_tables) {
    listed.push_back(t.text("name", "", ""));
    r.callbacks.push_back(reg.callbacks.parse(t));
  }
  for (const char* always : {"progress_bar", "metrics_logger"}) {
    const auto* e = reg.callbacks.find(always);
    if (e && std::find(listed.begin(), listed.end(), always) == listed.end()) {
      Options defaults = Options::describe(nullptr);
      r.callbacks.push_back(e->parse(defaults));
    }
  }
  read_predict(root, r, reg);
  Options ckpt = root.table("checkpoint", "resume checkpoints (checkpoints/step-<N>.safetensors): when, and how many are kept");
  r.checkpoint = CheckpointOptions::read(ckpt);
  read_expect(root, r);
  check_monitors(callback_tables, r.callbacks, r);
}

}  // namespace

Recipe load_recipe(const std::string& file, const std::vector<std::string>& overrides, const Registries& reg) {
  RecipeDocument doc(file, overrides);
  Recipe r;
  r.file = file;
  read_sections(doc.root(), r, reg);
  doc.finish();
  doc.diagnostics().throw_if_any();
  r.resolved_toml = doc.resolved_toml();
  return r;
}

std::vector<OptionDoc> describe_recipe(const Registries& reg) {
  std::vector<OptionDoc> docs;
  Recipe r;
  read_sections(Options::describe(&docs), r, reg);
  // A key read twice (the model's `name`, read for the run and again by its registry) is
  // listed once, with the doc line one of the readers gave.
  std::vector<OptionDoc> out;
  for (auto& d : docs) {
    auto same = std::find_if(out.begin(), out.end(), [&](const OptionDoc& o) { return o.key == d.key; });
    if (same == out.end()) out.push_back(std::move(d));
    else if (same->doc.empty()) same->doc = d.doc;
  }
  return out;
}

}  // namespace engine
