#include "engine/report/curves.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

namespace engine::report {

namespace {

std::string metric_of(const std::string& key) {
  auto slash = key.rfind('/');
  return slash == std::string::npos ? key : key.substr(slash + 1);
}

std::string dom_id(const std::string& text) {
  std::string out;
  for (char c : text)
    out += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  return out;
}

enum class X { epoch, step };

Series series_of(const std::vector<MetricRecord>& records, const std::string& key, X x) {
  Series s;
  for (const auto& r : records) {
    auto it = r.values.find(key);
    if (it == r.values.end()) continue;
    const double xv = x == X::epoch ? r.epoch : r.step;
    if (x == X::step && xv < 0) continue;
    s.x.push_back(xv);
    s.y.push_back(it->second);
  }
  return s;
}

// One line per (run, key); `from_steps` picks the step lines over the epoch lines.
struct Line {
  std::string key;
  bool from_steps;
  X x;
  std::string suffix;  // appended to the legend label
};

Chart make_chart(std::string id, std::string title, std::string x_label, std::string y_label,
                 const std::vector<RunData>& runs, const std::vector<std::string>& labels,
                 const std::vector<Line>& lines) {
  Chart c{std::move(id),
          std::move(title),
          std::move(x_label),
          std::move(y_label),
          lines.empty() || lines[0].x == X::epoch,
          {}};
  const bool several = runs.size() > 1;
  for (size_t r = 0; r < runs.size(); ++r)
    for (size_t k = 0; k < lines.size(); ++k) {
      const auto& l = lines[k];
      Series s = series_of(l.from_steps ? runs[r].steps : runs[r].epochs, l.key, l.x);
      if (s.x.empty()) continue;
      s.label = (several ? labels[r] + " " : "") + l.key + l.suffix;
      s.color = static_cast<int>(several ? r : k);
      s.dash = static_cast<int>(several ? k : 0);
      c.series.push_back(std::move(s));
    }
  return c;
}

std::set<std::string> keys_of(const std::vector<RunData>& runs, bool steps) {
  std::set<std::string> keys;
  for (const auto& run : runs)
    for (const auto& r : steps ? run.steps : run.epochs)
      for (const auto& [k, v] : r.values) keys.insert(k);
  return keys;
}

// train/loss before valid/loss before valid_ema/loss: the order a reader expects in a legend.
std::vector<std::string> ordered(std::vector<std::string> keys) {
  auto rank = [](const std::string& k) {
    return k.rfind("train", 0) == 0 ? 0 : k.rfind("valid/", 0) == 0 ? 1 : 2;
  };
  std::stable_sort(keys.begin(), keys.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return keys;
}

}  // namespace

std::vector<Chart> build_charts(const std::vector<RunData>& runs, const std::vector<std::string>& labels) {
  std::vector<Chart> charts;
  const auto epoch_keys = keys_of(runs, false), step_keys = keys_of(runs, true);

  std::vector<std::string> losses;
  std::map<std::string, std::vector<std::string>>
      metrics;  // "accuracy" -> valid/accuracy, valid_ema/accuracy
  for (const auto& k : epoch_keys) {
    if (is_bookkeeping(k)) continue;
    if (metric_of(k) == "loss")
      losses.push_back(k);
    else
      metrics[metric_of(k)].push_back(k);
  }
  losses = ordered(losses);
  {
    std::vector<Line> lines;
    for (const auto& k : losses) lines.push_back({k, false, X::epoch, ""});
    charts.push_back(make_chart("chart-loss-epoch", "Loss per epoch", "epoch", "loss", runs, labels, lines));
  }
  std::vector<Line> step_lines;
  for (const auto& k : ordered({step_keys.begin(), step_keys.end()}))
    if (metric_of(k) == "loss") step_lines.push_back({k, true, X::step, ""});
  if (!step_lines.empty()) {
    for (const auto& k : losses)
      if (k.rfind("train", 0) != 0) step_lines.push_back({k, false, X::step, " (epoch end)"});
    charts.push_back(
        make_chart("chart-loss-step", "Loss per step", "step", "loss", runs, labels, step_lines));
  }
  for (const auto& [m, keys] : metrics) {
    std::vector<Line> lines;
    for (const auto& k : ordered(keys)) lines.push_back({k, false, X::epoch, ""});
    charts.push_back(
        make_chart("chart-metric-" + dom_id(m), m + " per epoch", "epoch", m, runs, labels, lines));
  }
  // Learning rate: every step line has one; epoch lines carry the step they ended at.
  bool every_epoch_has_step = true;
  for (const auto& run : runs)
    for (const auto& e : run.epochs) every_epoch_has_step = every_epoch_has_step && e.step >= 0;
  if (step_keys.count("lr")) {
    // Step lines come every N steps and epoch lines at each epoch's end: together they draw the
    // schedule (a warm-up shorter than N steps still shows).
    std::vector<RunData> merged(runs.size());
    for (size_t r = 0; r < runs.size(); ++r) {
      for (const auto* records : {&runs[r].steps, &runs[r].epochs})
        for (const auto& e : *records)
          if (e.step >= 0 && e.values.count("lr"))
            merged[r].steps.push_back(MetricRecord{e.epoch, e.step, {{"lr", e.values.at("lr")}}});
      auto& m = merged[r].steps;
      std::stable_sort(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
      m.erase(std::unique(m.begin(), m.end(), [](const auto& a, const auto& b) { return a.step == b.step; }),
              m.end());
    }
    charts.push_back(make_chart("chart-lr", "Learning rate (head group)", "step", "lr", merged, labels,
                                {{"lr", true, X::step, ""}}));
  } else if (epoch_keys.count("lr")) {
    const X x = every_epoch_has_step ? X::step : X::epoch;
    charts.push_back(make_chart("chart-lr", "Learning rate (head group) at epoch end",
                                x == X::step ? "step" : "epoch", "lr", runs, labels, {{"lr", false, x, ""}}));
  }
  if (epoch_keys.count("images_per_s")) {
    std::vector<Line> lines{{"images_per_s", false, X::epoch, ""}};
    if (epoch_keys.count("eval_images_per_s"))
      lines.push_back({"eval_images_per_s", false, X::epoch, ""});
    charts.push_back(make_chart("chart-throughput", "Throughput: training and validation passes", "epoch",
                                "images/s", runs, labels, lines));
  }
  if (epoch_keys.count("comm_ms_per_step"))  // DDP runs only
    charts.push_back(make_chart("chart-comm", "Communication per optimizer step (main rank, waits included)",
                                "epoch", "ms", runs, labels, {{"comm_ms_per_step", false, X::epoch, ""}}));
  if (epoch_keys.count("seconds")) {
    // Cumulative: the slope is the time per epoch, the last point the run's wall time.
    double longest = 0;
    std::vector<RunData> cumulative(runs.size());
    for (size_t r = 0; r < runs.size(); ++r) cumulative[r].epochs = runs[r].epochs;
    for (auto& run : cumulative) {
      double total = 0;
      for (auto& e : run.epochs) {
        auto it = e.values.find("seconds");
        if (it == e.values.end()) continue;
        if (std::isfinite(it->second)) total += it->second;
        it->second = total;
        longest = std::max(longest, total);
      }
    }
    const bool minutes = longest > 600;
    if (minutes)
      for (auto& run : cumulative)
        for (auto& e : run.epochs)
          if (auto it = e.values.find("seconds"); it != e.values.end()) it->second /= 60;
    charts.push_back(make_chart("chart-wall-time", "Wall time (train + evaluation)", "epoch",
                                minutes ? "minutes" : "seconds", cumulative, labels,
                                {{"seconds", false, X::epoch, ""}}));
  }
  return charts;
}

}  // namespace engine::report
