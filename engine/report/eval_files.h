#pragma once
// The files of a run's final evaluation, read into RunData (run_data.h): valid_predictions.csv
// (one row per validation sample) and the confusion matrix (confusion_matrix.json, else .csv,
// else counted from the per-sample rows). A missing file leaves the field empty; a malformed row
// is skipped and counted in run.notes.
#include "engine/report/run_data.h"

namespace engine::report {

/// run.predictions from run.dir/valid_predictions.csv, read row by row (RFC 4180 quoting).
void read_predictions(RunData& run);

/// run.confusion; call after read_predictions and with run.classes read.
void read_confusion(RunData& run);

}  // namespace engine::report
