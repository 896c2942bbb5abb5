#pragma once
// Preemption: SIGTERM (Slurm, Kubernetes, `kill`) and SIGINT (Ctrl-C) ask a training run to stop at
// the next step boundary, write a checkpoint on every rank and exit with kPreemptedExitCode, so that
// `engine run RECIPE --resume RUN_DIR` continues exactly. Only the request is recorded here (an
// async-signal-safe flag); the trainer polls it once per optimizer step.
//
// A second SIGINT exits at once (exit 130), as Ctrl-C twice does in most tools. "Second" means more
// than kDebounceMs after the first: one Ctrl-C in a terminal reaches every process of the foreground
// group, and `engine launch` forwards it to its workers as well, so a worker sees that one key
// press twice within milliseconds. Repeated SIGTERMs never force an exit: Slurm signals every
// process of a step, and the checkpoint must not be cut short by the echo.
#include <stdexcept>

namespace engine::preemption {

/// Thrown by the trainer after the preemption checkpoint is written on every rank; the command
/// line prints what() (when not empty: the main process says how to resume) and exits with
/// kPreemptedExitCode.
struct Preempted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// EX_TEMPFAIL from <sysexits.h>: "try again later", which is what a preempted run should do.
constexpr int kPreemptedExitCode = 75;
constexpr long kDebounceMs = 500;

/// Installs the SIGINT/SIGTERM handlers (idempotent). Call before training starts.
void install();
/// Restores the handlers install() replaced.
void uninstall();
/// The signal that requested a stop (SIGTERM or SIGINT), or 0.
int requested();
/// Makes requested() return `sig` as if it had been received (tests, and a rank told by its peers).
void request(int sig);
/// Clears the request (a new run in the same process, e.g. `engine test` running several recipes).
void clear();

}  // namespace engine::preemption
