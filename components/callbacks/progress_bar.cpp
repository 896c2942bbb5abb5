#include "components/callbacks/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/trainer/fit_context.h"

namespace engine {

ProgressBarOptions ProgressBarOptions::read(Options& o) {
  ProgressBarOptions p;
  p.refresh_s = o.number("refresh_s", p.refresh_s, "seconds between redraws on a terminal", 0.01);
  p.plain_every_s = o.number("plain_every_s", p.plain_every_s,
                             "seconds between plain progress lines when stderr is not a terminal or TERM=dumb "
                             "(0 = only one at the end of each epoch)", 0);
  p.width = o.integer("width", p.width, "bar width in characters", 4, 200);
  return p;
}

ConsoleStyle ConsoleStyle::detect() {
  const char* term = std::getenv("TERM");
  const char* no_color = std::getenv("NO_COLOR");
  ConsoleStyle c;
  // A dumb terminal (Emacs shell buffers, some CI runners) prints '\r' as a new line or a glyph:
  // every redraw would become a line of its own.
  c.redraw = isatty(fileno(stderr)) && !(term && std::strcmp(term, "dumb") == 0);
  c.colour = c.redraw && !(no_color && *no_color);
  return c;
}

namespace {

std::string clock_text(double s) {
  int t = static_cast<int>(s + 0.5);
  return fmt::format("{}:{:02d}", t / 60, t % 60);
}

class ProgressBar : public Callback {
 public:
  ProgressBar(ProgressBarOptions o, ConsoleStyle style) : opts_(o), style_(style) {}

  void on_epoch_begin(FitContext&) override {
    loss_ema_ = -1;
    // A terminal shows the bar from the first step; plain lines start `plain_every_s` in.
    last_draw_ = style_.redraw ? -1e9 : 0;
    images_ = 0;
  }

  void on_step_end(FitContext& ctx, const StepLog& s) override {
    // A smoothed loss reads better than the noisy per-batch value (fastai's "smooth loss").
    loss_ema_ = loss_ema_ < 0 ? s.loss : 0.98 * loss_ema_ + 0.02 * s.loss;
    images_ += s.images;
    const bool last = s.batch + 1 == s.batches;
    const double every = style_.redraw ? opts_.refresh_s : opts_.plain_every_s;
    if (!last && (every <= 0 || s.seconds - last_draw_ < every)) return;
    last_draw_ = s.seconds;
    const double frac = static_cast<double>(s.batch + 1) / s.batches;
    const int filled = static_cast<int>(frac * opts_.width);
    const double ips = s.seconds > 0 ? images_ / s.seconds : 0;
    const double eta = frac > 0 ? s.seconds * (1 - frac) / frac : 0;
    std::string bar = std::string(filled, '=');
    if (style_.colour) bar = "\033[32m" + bar + "\033[0m";
    const std::string stats = fmt::format("{}/{} loss {:.4f} lr {:.2e} {:.0f} img/s {} ETA {}", s.batch + 1, s.batches,
                                          loss_ema_, s.lr, ips, clock_text(s.seconds), clock_text(eta));
    const std::string head = fmt::format("epoch {}/{} [", s.epoch + 1, ctx.epochs);
    const std::string tail = std::string(opts_.width - filled, ' ') + "] " + stats;
    if (style_.redraw) {
      // Without escapes, spaces blank out what a longer previous line left behind.
      const size_t shown = head.size() + filled + tail.size();
      std::string line = "\r" + head + bar + tail;
      if (style_.colour) line += "\033[K";
      else if (shown < shown_) line += std::string(shown_ - shown, ' ');
      shown_ = shown;
      std::fputs(line.c_str(), stderr);
    } else {
      std::fputs((head + bar + tail + "\n").c_str(), stderr);
    }
    std::fflush(stderr);
  }

  void on_epoch_end(FitContext&, const EpochLog& log) override {
    clear_bar();
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
      else if (k == "images_per_s" || k == "eval_images_per_s") row += fmt::format("  {:>14.0f}", v);
      else if (k == "comm_ms_per_step") row += fmt::format("  {:>14.1f}", v);
      else if (k == "lr") row += fmt::format("  {:>14.3e}", v);
      else row += fmt::format("  {:>14.6f}", v);
    }
    std::puts(row.c_str());
    std::fflush(stdout);
  }

  void on_fit_end(FitContext&) override { clear_bar(); }

 private:
  // The table row goes to stdout: on a shared terminal the bar's line must be blank first.
  void clear_bar() {
    if (!style_.redraw || shown_ == 0) return;
    const std::string blank = style_.colour ? "\r\033[K" : "\r" + std::string(shown_, ' ') + "\r";
    std::fputs(blank.c_str(), stderr);
    std::fflush(stderr);
    shown_ = 0;
  }

  ProgressBarOptions opts_;
  ConsoleStyle style_;
  bool header_done_ = false;
  double loss_ema_ = -1;
  double last_draw_ = -1e9;
  double images_ = 0;
  size_t shown_ = 0;  // visible length of the line on the terminal (0 = none drawn)
};

}  // namespace

void register_progress_bar(CallbackRegistry& registry) {
  registry.add("progress_bar", "progress on stderr (like tqdm) and the per-epoch metrics table on stdout (always on)",
               [](Options& o) {
                 auto opts = ProgressBarOptions::read(o);
                 return CallbackRegistry::Factory(
                     [opts] { return std::make_unique<ProgressBar>(opts, ConsoleStyle::detect()); });
               });
}

}  // namespace engine
