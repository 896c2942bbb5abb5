#pragma once
// The HTML tables and panels of a report, one function per panel; each returns an HTML fragment
// with a stable id or class that the page's links (and the browser test) find.
#include <string>
#include <vector>

#include "engine/report/run_data.h"
#include "engine/report/top_losses.h"

namespace engine::report {

/// <table id="overview">: one row per run: status, epochs, steps, wall time, throughput, and each
/// metric's last value with its best (min for losses and error rates, max otherwise) and epoch.
std::string overview_table(const std::vector<RunData>& runs, const std::vector<std::string>& labels);

/// <table class="run-info">: status, world size, accelerator, precision, batch, model, data,
/// machine, engine version and git revision, from run_info.json and the resolved recipe.
std::string run_info_table(const RunData& run);

/// <table class="confusion-matrix" id=...>: counts as a heat map (each cell shaded by its share of
/// the true class), recall and support per row, precision per column, and the most confused pairs.
std::string confusion_html(const ConfusionData& confusion, const std::string& id);

/// <div class="top-losses" id=...>: one <figure class="top-loss"> per sample, its image as an
/// <img src="data:image/png;base64,..."> with true label, prediction, probabilities and loss.
std::string top_losses_html(const WorstPredictions& worst, const std::string& id);

/// <table id="recipe-diff">: the keys whose values differ between the runs' resolved recipes.
std::string recipe_diff_html(const std::vector<RunData>& runs, const std::vector<std::string>& labels);

}  // namespace engine::report
