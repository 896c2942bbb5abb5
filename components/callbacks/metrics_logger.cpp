#include "components/callbacks/metrics_logger.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/trainer/fit_context.h"

namespace engine {

MetricsLoggerOptions MetricsLoggerOptions::read(Options& o) {
  MetricsLoggerOptions m;
  m.every_steps = o.integer("every_steps", m.every_steps, "also log a step line every N optimizer steps (0 = epochs only)", 0);
  return m;
}

namespace {

class MetricsLogger : public Callback {
 public:
  explicit MetricsLogger(MetricsLoggerOptions o) : opts_(o) {}

  void on_fit_begin(FitContext& ctx) override {
    std::filesystem::create_directories(ctx.run_dir);
    jsonl_.open(ctx.run_dir + "/metrics.jsonl", std::ios::trunc);
    csv_path_ = ctx.run_dir + "/metrics.csv";
    std::ofstream(csv_path_, std::ios::trunc);
  }

  void on_step_end(FitContext& ctx, const StepLog& s) override {
    if (opts_.every_steps <= 0 || ctx.state.step % opts_.every_steps != 0) return;
    nlohmann::json j{{"type", "step"}, {"epoch", s.epoch + 1}, {"batch", s.batch + 1}, {"step", ctx.state.step},
                     {"train/loss", s.loss}, {"lr", s.lr}};
    jsonl_ << j.dump() << "\n" << std::flush;
  }

  void on_epoch_end(FitContext& ctx, const EpochLog& log) override {
    nlohmann::json j{{"type", "epoch"}, {"epoch", log.epoch}};
    for (const auto& [k, v] : log.values) j[k] = v;
    jsonl_ << j.dump() << "\n" << std::flush;
    std::ofstream csv(csv_path_, std::ios::app);
    if (!csv_header_) {
      csv << "epoch";
      for (const auto& [k, v] : log.values) csv << "," << k;
      csv << "\n";
      csv_header_ = true;
    }
    csv << log.epoch;
    for (const auto& [k, v] : log.values) csv << "," << nlohmann::json(v).dump();
    csv << "\n";
  }

 private:
  MetricsLoggerOptions opts_;
  std::ofstream jsonl_;
  std::string csv_path_;
  bool csv_header_ = false;
};

}  // namespace

void register_metrics_logger(CallbackRegistry& registry) {
  registry.add("metrics_logger", "metrics.jsonl + metrics.csv in the run directory (always on)", [](Options& o) {
    auto opts = MetricsLoggerOptions::read(o);
    return CallbackRegistry::Factory([opts] { return std::make_unique<MetricsLogger>(opts); });
  });
}

}  // namespace engine
