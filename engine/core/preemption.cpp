#include "engine/core/preemption.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace engine::preemption {

namespace {

std::atomic<int> g_signal{0};
std::atomic<long> g_first_int_ms{0};
struct sigaction g_old_int, g_old_term;
bool g_installed = false;

long now_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

void on_signal(int sig) {
  if (sig == SIGINT) {
    const long now = now_ms();
    long first = g_first_int_ms.load();
    if (first == 0) {
      g_first_int_ms.store(now);
    } else if (now - first > kDebounceMs) {
      static const char msg[] = "\ninterrupted twice: exiting without a checkpoint\n";
      (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
      _exit(128 + SIGINT);
    }
  }
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);  // the first signal names the cause
}

}  // namespace

void install() {
  if (g_installed) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and waits continue; the flag is polled per step
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  g_installed = true;
}

void uninstall() {
  if (!g_installed) return;
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed = false;
}

int requested() { return g_signal.load(); }

void request(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
}

void clear() {
  g_signal.store(0);
  g_first_int_ms.store(0);
}

}  // namespace engine::preemption
