#pragma once
// Process plumbing shared by launch_processes() and launch(): fork workers, watch them with the
// fail-fast rule, forward signals. Internal to engine/launcher (launcher.h is the public API).
#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace engine::launcher_detail {

/// A started worker as its supervisor sees it.
struct Worker {
  int rank = 0;        // global rank, for messages
  pid_t pid = -1;      // -1 once reaped
  int report_fd = -1;  // read end of the worker's failure-report pipe, or -1 (exec'd workers)
};

/// What supervise() saw.
struct Outcome {
  bool ok = true;          // every worker exited with code 0
  int failed_rank = -1;    // the first failing worker's rank (when !ok)
  std::string how;         // "exited with code 3" / "killed by signal SIGKILL"
  int exit_code = -1;      // the failing worker's exit code, -1 when killed by a signal
  std::string report;      // the failing worker's own message (fork workers only), else ""
  int interrupted_by = 0;  // SIGINT/SIGTERM the supervisor received and forwarded, else 0
  int preempted = 0;       // workers that exited with preemption::kPreemptedExitCode (checkpointed)
};

/// While alive, makes sure this process can wait for its children: a host program that set
/// SIGCHLD to SIG_IGN would have the kernel reap them, losing their exit status.
class ReapableChildren {
 public:
  ReapableChildren();
  ~ReapableChildren();
  ReapableChildren(const ReapableChildren&) = delete;
  ReapableChildren& operator=(const ReapableChildren&) = delete;

 private:
  bool restore_ = false;
};

/// Forks a child that runs `body` and never returns into the caller's code: `body` must exec or
/// _exit (a return becomes _exit(127)). Before `body` the child restores default handlers for
/// SIGINT/SIGTERM/crash signals (a test framework's handlers must not run in a worker), unblocks
/// signals and asks the kernel to SIGKILL it when the parent dies, so no worker outlives its
/// launcher. stdio buffers are flushed before the fork so nothing is printed twice.
pid_t spawn(const std::function<void()>& body);

/// Waits for every worker (polling waitpid every 20 ms). The first worker that exits non-zero
/// or is killed by a signal makes it SIGTERM the others, SIGKILL what is left after `grace_ms`,
/// reap them all and return that worker's rank. SIGINT/SIGTERM sent to the calling process while
/// it waits are forwarded to the workers (its previous handlers are restored on return).
/// When several workers are found dead in the same poll, the one killed by a signal wins, then
/// the earliest report (fork workers), then the lowest rank: the cause, not its echoes.
Outcome supervise(std::vector<Worker>& workers, int grace_ms = 3000);

/// SIGTERM every live worker, SIGKILL those still alive after `grace_ms`, reap them all.
void stop_all(std::vector<Worker>& workers, int grace_ms);

/// In a fork worker: writes `what` (with a timestamp for supervise()'s ordering) to the report
/// pipe. Async-signal-safe except for the string formatting; never throws.
void write_report(int fd, const std::string& what) noexcept;

/// "SIGKILL" for SIGKILL, ..., "signal 42" for the rest.
std::string signal_name(int sig);

}  // namespace engine::launcher_detail
