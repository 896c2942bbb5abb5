#include "components/callbacks/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "engine/trainer/fit_context.h"

namespace engine {

ProgressBarOptions ProgressBarOptions::read(Options& o) {
  ProgressBarOptions p;
  p.refresh_s = o.number("refresh_s", p.refresh_s, "seconds between redraws on a terminal", 0.01);
  p.plain_every_s = o.number("plain_every_s", p.plain_every_s, "seconds between progress lines when not a terminal (0 = none)", 0);
  p.width = o.integer("width", p.width, "bar width in characters", 4, 200);
  return p;
}

namespace {

std::string clock_text(double s) {
  int t = static_cast<int>(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

class ProgressBar : public Callback {
 public:
  explicit ProgressBar(ProgressBarOptions o) : opts_(o), tty_(isatty(fileno(stdout))) {}

  void on_epoch_begin(FitContext&) override {
    loss_ema_ = -1;
    last_draw_ = -1e9;
  }

  void on_step_end(FitContext& ctx, const StepLog& s) override {
    // A smoothed loss reads better than the noisy per-batch value (fastai's "smooth loss").
    loss_ema_ = loss_ema_ < 0 ? s.loss : 0.98 * loss_ema_ + 0.02 * s.loss;
    images_ += s.images;
    const bool last = s.batch + 1 == s.batches;
    const double every = tty_ ? opts_.refresh_s : opts_.plain_every_s;
    if (!last && (every <= 0 || s.seconds - last_draw_ < every)) return;
    if (!tty_ && last) return;  // the table row follows
    last_draw_ = s.seconds;
    const double frac = static_cast<double>(s.batch + 1) / s.batches;
    const int filled = static_cast<int>(frac * opts_.width);
    const double ips = s.seconds > 0 ? (s.batch + 1) * (s.images) / s.seconds : 0;
    const double eta = frac > 0 ? s.seconds * (1 - frac) / frac : 0;
    std::string line = fmt::format("epoch {}/{} [{}{}] {}/{} loss {:.4f} lr {:.2e} {:.0f} img/s {} ETA {}", s.epoch + 1,
                                   ctx.epochs, std::string(filled, '='), std::string(opts_.width - filled, ' '),
                                   s.batch + 1, s.batches, loss_ema_, s.lr, ips, clock_text(s.seconds),
                                   clock_text(eta));
    if (tty_) std::fputs(("\r\033[K" + line).c_str(), stdout);
    else std::puts(line.c_str());
    std::fflush(stdout);
  }

  void on_epoch_end(FitContext&, const EpochLog& log) override {
    if (tty_) std::fputs("\r\033[K", stdout);
    if (!header_done_) {
      std::string h = fmt::format("{:>5}", "epoch");
      for (const auto& [k, v] : log.values)
        if (k != "step") h += fmt::format("  {:>14}", k);
      std::puts(h.c_str());
      header_done_ = true;
    }
    std::string row = fmt::format("{:>5}", log.epoch);
    for (const auto& [k, v] : log.values) {
      if (k == "step") continue;
      if (k == "seconds") row += fmt::format("  {:>14}", clock_text(v));
      else if (k == "images_per_s") row += fmt::format("  {:>14.0f}", v);
      else if (k == "lr") row += fmt::format("  {:>14.3e}", v);
      else row += fmt::format("  {:>14.6f}", v);
    }
    std::puts(row.c_str());
    std::fflush(stdout);
  }

 private:
  ProgressBarOptions opts_;
  bool tty_;
  bool header_done_ = false;
  double loss_ema_ = -1;
  double last_draw_ = -1e9;
  int64_t images_ = 0;
};

}  // namespace

void register_progress_bar(CallbackRegistry& registry) {
  registry.add("progress_bar", "console progress bar and per-epoch metrics table (always on)", [](Options& o) {
    auto opts = ProgressBarOptions::read(o);
    return CallbackRegistry::Factory([opts] { return std::make_unique<ProgressBar>(opts); });
  });
}

}  // namespace engine
