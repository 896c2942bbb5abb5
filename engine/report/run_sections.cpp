#include "engine/report/run_sections.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "engine/report/html.h"
#include "engine/report/recipe_diff.h"

namespace engine::report {

namespace {

bool lower_is_better(const std::string& key) {
  return key.find("loss") != std::string::npos || key.find("error") != std::string::npos;
}

// TOML strings come back quoted from flatten_toml ('bf16'): a table shows the bare text.
std::string unquote(const std::string& v) {
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front())
    return v.substr(1, v.size() - 2);
  return v;
}

std::string lookup(const std::map<std::string, std::string>& m, const std::string& key,
                   const std::string& fallback = "") {
  auto it = m.find(key);
  return it == m.end() ? fallback : unquote(it->second);
}

std::string status_html(const RunData& run) {
  std::vector<std::pair<std::string, std::string>> tags;  // text, class
  const std::string ended = lookup(run.info, "status");
  if (ended == "failed")
    tags.emplace_back("failed", "bad");
  else if (ended == "preempted")
    tags.emplace_back("preempted (resumable)", "warn");
  else if (run.finished)
    tags.emplace_back("finished", "good");
  else
    tags.emplace_back("partial", "warn");
  if (run.has_non_finite()) tags.emplace_back("NaN/inf", "bad");
  std::string out;
  for (const auto& [t, c] : tags) out += "<span class=\"tag " + c + "\">" + t + "</span> ";
  return out;
}

std::vector<std::string> metric_keys(const std::vector<RunData>& runs) {
  std::set<std::string> keys;
  for (const auto& run : runs)
    for (const auto& e : run.epochs)
      for (const auto& [k, v] : e.values)
        if (!is_bookkeeping(k)) keys.insert(k);
  std::vector<std::string> out(keys.begin(), keys.end());
  auto rank = [](const std::string& k) {
    return k == "train/loss" ? 0 : k.find("loss") != std::string::npos ? 1 : 2;
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
  return out;
}

std::string td(const std::string& html, const std::string& cls = "") {
  return cls.empty() ? "<td>" + html + "</td>" : "<td class=\"" + cls + "\">" + html + "</td>";
}

}  // namespace

std::string overview_table(const std::vector<RunData>& runs, const std::vector<std::string>& labels) {
  const auto keys = metric_keys(runs);
  std::string h =
      "<table id=\"overview\" "
      "class=\"data\"><thead><tr><th>run</th><th>status</th><th>epochs</th><th>steps</th>"
      "<th>wall time</th><th>images/s</th>";
  for (const auto& k : keys) h += "<th>" + html_escape(k) + "<br><small>last (best @ epoch)</small></th>";
  h += "</tr></thead><tbody>";
  for (size_t r = 0; r < runs.size(); ++r) {
    const auto& run = runs[r];
    double step = -1, ips = NAN;
    for (const auto* records : {&run.epochs, &run.steps})
      for (const auto& e : *records) step = std::max(step, e.step);
    if (!run.epochs.empty())
      if (auto it = run.epochs.back().values.find("images_per_s"); it != run.epochs.back().values.end())
        ips = it->second;
    h += "<tr><th><a href=\"#run-" + std::to_string(r) + "\">" + html_escape(labels[r]) + "</a></th>" +
         td(status_html(run)) + td(run.epochs.empty() ? "0" : format_value(run.epochs.back().epoch), "num") +
         td(step < 0 ? "?" : format_value(step), "num") + td(format_duration(run.wall_seconds()), "num") +
         td(std::isnan(ips) ? "" : format_value(std::round(ips)), "num");
    for (const auto& k : keys) {
      double last = NAN, best = NAN, best_epoch = 0;
      bool any = false;
      for (const auto& e : run.epochs) {
        auto it = e.values.find(k);
        if (it == e.values.end()) continue;
        any = true;
        last = it->second;
        if (std::isfinite(last) && (std::isnan(best) || (lower_is_better(k) ? last < best : last > best))) {
          best = last;
          best_epoch = e.epoch;
        }
      }
      if (!any) {
        h += td("");
        continue;
      }
      std::string cell = "<span class=\"" + std::string(std::isfinite(last) ? "" : "bad") + "\">" +
                         format_value(last) + "</span>";
      if (!std::isnan(best) && best != last)
        cell += " <small>(" + format_value(best) + " @ " + format_value(best_epoch) + ")</small>";
      h += td(cell, "num");
    }
    h += "</tr>";
  }
  return h + "</tbody></table>";
}

std::string run_info_table(const RunData& run) {
  const auto recipe = flatten_toml(run.recipe_toml);
  const auto& info = run.info;
  const bool recorded = !info.empty();
  const std::string not_recorded =
      "<span class=\"muted\">not recorded (run_info.json is written when `engine run` ends)</span>";
  auto row = [](const std::string& k, const std::string& v) {
    return "<tr><th>" + k + "</th><td>" + v + "</td></tr>";
  };
  std::string h = "<table class=\"run-info\">";
  h += row("directory", "<code>" + html_escape(run.dir) + "</code>");
  h += row("status", status_html(run) + html_escape(recorded ? "(" + lookup(info, "status") + " " +
                                                                   lookup(info, "ended_at") + ")"
                                                             : ""));
  const std::string world = lookup(info, "world_size");
  h += row("world size",
           recorded ? html_escape(world) + (world == "1" ? " process" : " processes") : not_recorded);
  h += row("accelerator", recorded ? html_escape(lookup(info, "accelerator"))
                                   : html_escape("device " + lookup(recipe, "accelerator.device", "?")));
  h += row("precision",
           html_escape(lookup(info, "mixed_precision", lookup(recipe, "accelerator.mixed_precision", "?"))));
  std::string batch = lookup(recipe, "data.batch_size", "?") + " per process";
  if (recorded && world != "1" && !world.empty()) batch += " x " + world;
  if (lookup(recipe, "train.accumulate_steps", "1") != "1")
    batch += " x " + lookup(recipe, "train.accumulate_steps") + " accumulated";
  h += row("batch", html_escape(batch));
  h += row("model", html_escape(lookup(recipe, "model.name", "?")));
  std::string data = lookup(recipe, "data.dataset.name", "?");
  if (auto p = lookup(recipe, "data.dataset.path"); !p.empty()) data += " " + p;
  h += row("data", html_escape(data));
  if (recorded) {
    std::string m = lookup(info, "machine.hostname");
    for (const char* k : {"machine.cpu"})
      if (auto v = lookup(info, k); !v.empty()) m += ", " + v;
    if (auto v = lookup(info, "machine.cores"); !v.empty()) m += ", " + v + " cores";
    if (auto v = lookup(info, "machine.memory_gib"); !v.empty()) m += ", " + v + " GiB";
    h += row("machine", html_escape(m));
    h += row("engine",
             html_escape(lookup(info, "engine_version") + ", git " + lookup(info, "git_revision") + ", " +
                         lookup(info, "build_type") + ", LibTorch " + lookup(info, "torch_version")));
  } else {
    h += row("machine, engine build", not_recorded);
  }
  return h + "</table>";
}

std::string confusion_html(const ConfusionData& c, const std::string& id) {
  const size_t n = c.counts.size();
  std::vector<double> support(n, 0), predicted(n, 0);
  double total = 0, correct = 0;
  for (size_t t = 0; t < n; ++t)
    for (size_t p = 0; p < c.counts[t].size() && p < n; ++p) {
      support[t] += c.counts[t][p];
      predicted[p] += c.counts[t][p];
      total += c.counts[t][p];
      if (t == p) correct += c.counts[t][p];
    }
  auto name = [&](size_t i) { return html_escape(i < c.names.size() ? c.names[i] : std::to_string(i)); };
  auto ratio = [](double a, double b) {
    if (b <= 0) return std::string("–");  // undefined (never predicted / never occurs), not 0
    char buf[16];
    std::snprintf(buf, sizeof buf, "%.4f", a / b);
    return std::string(buf);
  };
  std::string h = "<table class=\"confusion-matrix\" id=\"" + html_escape(id) + "\"><caption>" +
                  format_value(total) + " validation samples, accuracy " + ratio(correct, total) +
                  " <small>(from " + html_escape(c.source) +
                  ")</small></caption><thead><tr><th class=\"corner\">true \\ predicted</th>";
  for (size_t p = 0; p < n; ++p) h += "<th>" + name(p) + "</th>";
  h += "<th class=\"pr\">recall</th><th class=\"pr\">support</th></tr></thead><tbody>";
  for (size_t t = 0; t < n; ++t) {
    h += "<tr><th>" + name(t) + "</th>";
    for (size_t p = 0; p < n; ++p) {
      const double v = p < c.counts[t].size() ? c.counts[t][p] : 0;
      const double share = support[t] > 0 ? v / support[t] : 0;
      // Diagonal in blue by its share of the class; confusions in red, boosted so that a few
      // percent already shows: those are the cells a reader is looking for.
      const double alpha = v == 0 ? 0 : t == p ? 0.15 + 0.85 * share : std::min(1.0, 0.15 + 3 * share);
      char style[96];
      std::snprintf(style, sizeof style, "background:rgba(%s,%.2f);color:%s",
                    t == p ? "31,119,180" : "214,39,40", alpha, alpha > 0.55 ? "#fff" : "#222");
      h += "<td style=\"" + std::string(style) + "\" title=\"true " + name(t) + ", predicted " + name(p) +
           ": " + format_value(v) + " (" + format_value(share * 100) + "% of " + name(t) + ")\">" +
           format_value(v) + "</td>";
    }
    h += "<td class=\"pr\">" + ratio(c.counts[t].size() > t ? c.counts[t][t] : 0, support[t]) +
         "</td><td class=\"pr\">" + format_value(support[t]) + "</td></tr>";
  }
  h += "<tr class=\"pr\"><th>precision</th>";
  for (size_t p = 0; p < n; ++p)
    h += "<td>" + ratio(p < c.counts[p].size() ? c.counts[p][p] : 0, predicted[p]) + "</td>";
  h += "<td></td><td></td></tr></tbody></table>";

  struct Pair {
    double count;
    size_t t, p;
  };
  std::vector<Pair> pairs;
  for (size_t t = 0; t < n; ++t)
    for (size_t p = 0; p < n && p < c.counts[t].size(); ++p)
      if (t != p && c.counts[t][p] > 0) pairs.push_back({c.counts[t][p], t, p});
  std::sort(pairs.begin(), pairs.end(), [](const Pair& a, const Pair& b) { return a.count > b.count; });
  if (!pairs.empty()) {
    h += "<p class=\"confused\">Most confused (true → predicted): ";
    for (size_t i = 0; i < pairs.size() && i < 5; ++i)
      h += (i ? ", " : "") + name(pairs[i].t) + " → " + name(pairs[i].p) + " <b>" +
           format_value(pairs[i].count) + "</b>";
    h += "</p>";
  }
  return h;
}

std::string top_losses_html(const WorstPredictions& worst, const std::string& id) {
  std::string h;
  if (!worst.note.empty()) h += "<p class=\"note warn\">" + html_escape(worst.note) + "</p>";
  h += "<div class=\"top-losses\" id=\"" + html_escape(id) + "\">";
  size_t rank = 0;
  for (const auto& t : worst.items) {
    const auto& r = t.row;
    const bool wrong = r.label != r.prediction;
    h += "<figure class=\"top-loss" + std::string(wrong ? " wrong" : "") + "\">";
    if (!t.png.empty())
      h += "<img src=\"data:image/png;base64," + base64(t.png) + "\" alt=\"validation sample " +
           std::to_string(r.index) + "\">";
    else
      h += "<div class=\"no-image\">no image</div>";
    h += "<figcaption><b>#" + std::to_string(++rank) + "</b> true <b>" + html_escape(r.label) +
         "</b> → pred <b class=\"" + (wrong ? "bad" : "good") + "\">" + html_escape(r.prediction) +
         "</b><br>p(pred) " + format_value(r.probability) + "<br>p(true) " +
         format_value(r.true_probability) + "<br>loss " + format_value(r.loss) +
         "<br><span class=\"muted\">" +
         html_escape(r.name.empty() ? "index " + std::to_string(r.index) : r.name) +
         "</span></figcaption></figure>";
  }
  return h + "</div>";
}

std::string recipe_diff_html(const std::vector<RunData>& runs, const std::vector<std::string>& labels) {
  std::vector<std::string> texts;
  for (const auto& r : runs) texts.push_back(r.recipe_toml);
  const auto rows = recipe_differences(texts);
  std::string h = "<table id=\"recipe-diff\" class=\"data\"><thead><tr><th>key</th>";
  for (const auto& l : labels) h += "<th>" + html_escape(l) + "</th>";
  h += "</tr></thead><tbody>";
  for (const auto& d : rows) {
    h += "<tr><th><code>" + html_escape(d.key) + "</code></th>";
    for (const auto& v : d.values)
      h += v ? "<td><code>" + html_escape(*v) + "</code></td>" : "<td class=\"muted\">(absent)</td>";
    h += "</tr>";
  }
  if (rows.empty())
    h += "<tr><td colspan=\"" + std::to_string(labels.size() + 1) +
         "\">the resolved recipes are identical</td></tr>";
  return h + "</tbody></table>";
}

}  // namespace engine::report
