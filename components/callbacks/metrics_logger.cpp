#include "components/callbacks/metrics_logger.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
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

  // A resumed run keeps what was logged up to its checkpoint and drops what was logged after it
  // (those steps run again): the log ends up as one uninterrupted run would have written it.
  std::string state() const override {
    return std::to_string(bytes(jsonl_path_)) + " " + std::to_string(bytes(csv_path_)) + " " + (csv_header_ ? "1" : "0");
  }
  void load_state(FitContext&, const std::string& text) override {
    std::istringstream s(text);
    int header = 0;
    s >> keep_jsonl_ >> keep_csv_ >> header;
    csv_header_ = header != 0;
  }

  void on_fit_begin(FitContext& ctx) override {
    std::filesystem::create_directories(ctx.run_dir);
    jsonl_path_ = ctx.run_dir + "/metrics.jsonl";
    csv_path_ = ctx.run_dir + "/metrics.csv";
    keep(jsonl_path_, keep_jsonl_);
    keep(csv_path_, keep_csv_);
    jsonl_.open(jsonl_path_, std::ios::app);
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
  static uintmax_t bytes(const std::string& path) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path, ec);
    return ec ? 0 : n;
  }
  // Cuts `path` to its first `n` bytes (creating it empty when n == 0 or it is missing).
  static void keep(const std::string& path, uintmax_t n) {
    std::error_code ec;
    if (n == 0 || !std::filesystem::exists(path, ec)) {
      std::ofstream(path, std::ios::trunc);
      return;
    }
    std::filesystem::resize_file(path, std::min<uintmax_t>(n, bytes(path)), ec);
    if (ec) throw std::runtime_error("metrics_logger: cannot cut " + path + " back to its checkpoint: " + ec.message());
  }

  MetricsLoggerOptions opts_;
  std::ofstream jsonl_;
  std::string jsonl_path_, csv_path_;
  uintmax_t keep_jsonl_ = 0, keep_csv_ = 0;
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
