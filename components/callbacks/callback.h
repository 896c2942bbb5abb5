#pragma once
// Contract of every callback: virtual methods with no-op defaults on a small set of events
// (STYLE.md habit 7). The loop never dispatches by string.
// - main_process_only() == true (the default): the trainer calls it on rank 0 only, so it may
//   print and write run-dir files freely. A callback that influences training (early stopping)
//   returns false and then sees identical, already-reduced values on every rank.
// - Values in EpochLog are global (reduced over ranks), keyed "train/loss", "valid/accuracy", ...
// - Constructing a callback is cheap and has no side effects: load_recipe() builds each listed
//   callback once to ask monitored(), so a typo'd monitor is a recipe error before any compute.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/registry/registry.h"

namespace engine {

struct FitContext;

/// One optimizer step, as the progress bar sees it.
struct StepLog {
  int64_t epoch = 0;          // 0-based
  int64_t batch = 0;          // 0-based within the epoch
  int64_t batches = 0;        // per epoch
  double loss = 0;            // this rank's batch loss
  double lr = 0;
  int64_t images = 0;         // global images in this step
  double seconds = 0;         // since the epoch began
};

/// One row of the metrics table: ordered (name, value) pairs.
struct EpochLog {
  int64_t epoch = 0;  // 1-based, as printed
  std::vector<std::pair<std::string, double>> values;
  double get(const std::string& key, double fallback = 0) const;
  bool has(const std::string& key) const;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual bool main_process_only() const { return true; }
  /// The EpochLog key this callback watches ("valid/accuracy"), or "" when it watches none.
  /// load_recipe() reports a key the recipe does not produce at the callback's `monitor` key.
  virtual std::string monitored() const { return {}; }
  /// What must survive a resume (best value so far, patience used, bytes logged) as text, or ""
  /// when the callback keeps nothing. A resumed run calls load_state(ctx, what state() returned),
  /// on the same rank, before on_fit_begin.
  virtual std::string state() const { return {}; }
  virtual void load_state(FitContext&, const std::string&) {}
  virtual void on_fit_begin(FitContext&) {}
  virtual void on_epoch_begin(FitContext&) {}
  virtual void on_step_end(FitContext&, const StepLog&) {}
  virtual void on_epoch_end(FitContext&, const EpochLog&) {}
  virtual void on_fit_end(FitContext&) {}
};

using CallbackRegistry = Registry<Callback>;

void register_callbacks(CallbackRegistry& registry);

}  // namespace engine
