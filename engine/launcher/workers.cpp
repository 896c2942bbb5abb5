// Fork, watch, fail fast (see workers.h). Polling instead of SIGCHLD keeps the supervisor free of
// process-wide signal masks, which matters because launch() runs inside arbitrary (threaded)
// programs such as a test binary.
#include "engine/launcher/workers.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "engine/core/preemption.h"

namespace engine::launcher_detail {
namespace {

volatile sig_atomic_t g_received = 0;
extern "C" void remember_signal(int sig) { g_received = sig; }

// Installs the forwarding handlers for the duration of supervise(), then puts back whatever the
// host program had (a test framework's crash handlers, a trainer's graceful-stop handler...).
class ForwardSignals {
 public:
  ForwardSignals() {
    g_received = 0;
    struct sigaction sa {};
    sa.sa_handler = remember_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: let the poll's sleep wake up early
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~ForwardSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  int take() {
    int s = g_received;
    g_received = 0;
    return s;
  }

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The worker has exited, so its write end is closed: read to EOF (non-blocking in case a
// grandchild still holds it).
std::string read_report(int fd) {
  if (fd < 0) return "";
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  return text;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "killed by signal " + signal_name(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// Report format: "<steady-clock ns>\n<message>". No report means "died without a word": it
// sorts first, since a worker killed from outside is the likely cause of its peers' errors.
struct Failure {
  size_t index;
  bool by_signal;
  int64_t when_ns;
  std::string message;
  std::string how;
  int exit_code = -1;
};

Failure make_failure(size_t index, int status, int fd) {
  std::string text = read_report(fd);
  Failure f{index, WIFSIGNALED(status) != 0, -1, "", describe_status(status),
            WIFEXITED(status) ? WEXITSTATUS(status) : -1};
  size_t nl = text.find('\n');
  if (nl != std::string::npos) {
    f.when_ns = std::strtoll(text.substr(0, nl).c_str(), nullptr, 10);
    f.message = text.substr(nl + 1);
  }
  return f;
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(sig);
  }
}

ReapableChildren::ReapableChildren() {
  struct sigaction old {};
  sigaction(SIGCHLD, nullptr, &old);
  if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) {
    signal(SIGCHLD, SIG_DFL);
    restore_ = true;
  }
}

ReapableChildren::~ReapableChildren() {
  if (restore_) signal(SIGCHLD, SIG_IGN);
}

pid_t spawn(const std::function<void()>& body) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  pid_t parent = getpid();
  // Fork with every signal blocked: a SIGTERM from the supervisor that reaches the child before
  // it has reset its handlers would otherwise run the host's handler (a test framework's crash
  // reporter) inside the worker. Blocked, it waits and then meets the default action.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = fork();
  if (pid != 0) {  // parent (or -1: the caller reports errno)
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    errno = err;
    return pid;
  }
  for (int sig : {SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGSEGV, SIGABRT, SIGFPE, SIGILL, SIGBUS, SIGPIPE}) {
    signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);  // the parent died before prctl took effect
#endif
  body();
  _exit(127);
}

void write_report(int fd, const std::string& what) noexcept {
  if (fd < 0) return;
  try {
    std::string text = std::to_string(now_ns()) + "\n" + what.substr(0, 16000);
    const char* p = text.data();
    size_t left = text.size();
    while (left > 0) {  // < pipe capacity in practice, so this never blocks for long
      ssize_t n = write(fd, p, left);
      if (n <= 0) break;
      p += n;
      left -= static_cast<size_t>(n);
    }
  } catch (...) {
  }
}

void stop_all(std::vector<Worker>& workers, int grace_ms) {
  for (auto& w : workers) {
    if (w.pid > 0) kill(w.pid, SIGTERM);
  }
  for (int waited = 0;; waited += 20) {
    bool alive = false;
    for (auto& w : workers) {
      if (w.pid > 0 && waitpid(w.pid, nullptr, WNOHANG) == w.pid) w.pid = -1;
      alive = alive || w.pid > 0;
    }
    if (!alive) return;
    if (waited >= grace_ms) break;
    sleep_ms(20);
  }
  for (auto& w : workers) {  // ignored SIGTERM or stuck in a syscall: no more waiting
    if (w.pid > 0) {
      kill(w.pid, SIGKILL);
      waitpid(w.pid, nullptr, 0);
      w.pid = -1;
    }
  }
}

Outcome supervise(std::vector<Worker>& workers, int grace_ms) {
  ForwardSignals signals;
  Outcome out;
  for (;;) {
    if (int sig = signals.take()) {
      out.interrupted_by = sig;
      for (auto& w : workers) {
        if (w.pid > 0) kill(w.pid, sig);
      }
    }
    std::vector<Failure> failures;
    bool alive = false;
    for (size_t i = 0; i < workers.size(); ++i) {
      auto& w = workers[i];
      if (w.pid <= 0) continue;
      int status = 0;
      pid_t got = waitpid(w.pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) {
        alive = true;
        continue;
      }
      w.pid = -1;
      if (got < 0) {  // ECHILD: the host program set SIGCHLD to SIG_IGN, so the kernel reaped it
        Failure f = make_failure(i, 0, w.report_fd);
        f.how = "vanished (exit status unknown: SIGCHLD is ignored in the launching process)";
        failures.push_back(std::move(f));
      } else if (WIFEXITED(status) && WEXITSTATUS(status) == preemption::kPreemptedExitCode) {
        // Preempted and checkpointed: not a failure. Its peers agreed on the same step and are
        // finishing the same checkpoint: wait for them instead of stopping them mid-write.
        ++out.preempted;
      } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failures.push_back(make_failure(i, status, w.report_fd));
      }
    }
    if (!failures.empty()) {
      auto first =
          std::min_element(failures.begin(), failures.end(), [&](const Failure& a, const Failure& b) {
            if (a.by_signal != b.by_signal) return a.by_signal;
            if (a.when_ns != b.when_ns) return a.when_ns < b.when_ns;
            return workers[a.index].rank < workers[b.index].rank;
          });
      out.ok = false;
      out.failed_rank = workers[first->index].rank;
      out.report = first->message;
      out.how = first->how;
      out.exit_code = first->exit_code;
      stop_all(workers, grace_ms);
      return out;
    }
    if (!alive) return out;
    sleep_ms(20);
  }
}

}  // namespace engine::launcher_detail
