// build/libengine_op_profile.so: the time of every LibTorch op a process runs, by op and caller, printed
// at exit. LD_PRELOAD it into any engine command:
//
//   LD_PRELOAD=build/libengine_op_profile.so OP_PROFILE=/tmp/ops.txt build/engine run recipes/mnist_convnext.toml ...
//
// Each op (aten::*, autograd nodes, the engine's RECORD_FUNCTION scopes) is keyed "caller > op" and gets
// its self time (its own time minus that of the ops it called), total time and call count; the file
// lists the 150 largest self times. perf names the engine's own kernels but not LibTorch's (its
// TensorIterator kernels are internal symbols, and its frames carry no frame pointers): this found the
// fills, pads and adds behind the ~15% of a training step that perf put in "libtorch_cpu.so".
// Under DDP put %p in OP_PROFILE (one file per process, named by its pid; a process that ran no op,
// such as `engine run`'s launcher, writes none).
// The timing adds ~1 us per op (a run of many small ops looks slower than it is); input shapes are
// not recorded (boxing every op's inputs made runs ~50x slower).
#include <ATen/record_function.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Frame {
  std::string key;
  Clock::time_point start;
  double child_ms = 0;
};
struct Totals {
  double self_ms = 0, total_ms = 0;
  long calls = 0;
};

thread_local std::vector<Frame> stack;
std::mutex mutex;
auto* totals = new std::map<std::string, Totals>();  // never destroyed: ops may end during exit

std::string op_name(const std::string& key) {  // "caller > op" -> "op"
  const auto at = key.rfind(" > ");
  return at == std::string::npos ? key : key.substr(at + 3);
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  std::string key = fn.name();
  if (!stack.empty()) key = op_name(stack.back().key) + " > " + key;
  stack.push_back({std::move(key), Clock::now(), 0});
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (stack.empty()) return;
  Frame f = std::move(stack.back());
  stack.pop_back();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - f.start).count();
  if (!stack.empty()) stack.back().child_ms += ms;
  std::lock_guard<std::mutex> lock(mutex);
  Totals& t = (*totals)[f.key];
  t.self_ms += ms - f.child_ms;
  t.total_ms += ms;
  ++t.calls;
}

struct Profile {
  Profile() {
    at::addGlobalCallback(at::RecordFunctionCallback(&on_enter, &on_exit)
                              .needsInputs(false)
                              .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  }
  ~Profile() {
    std::vector<std::pair<std::string, Totals>> rows;
    {
      std::lock_guard<std::mutex> lock(mutex);
      rows.assign(totals->begin(), totals->end());
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.self_ms > b.second.self_ms; });
    double all = 0;
    for (const auto& r : rows) all += r.second.self_ms;
    if (rows.empty()) return;  // a process that ran no op (`engine run`'s launcher under DDP) keeps quiet
    const char* env = std::getenv("OP_PROFILE");
    std::string path = env && *env ? env : "op_profile.txt";
    if (const auto at = path.find("%p"); at != std::string::npos)  // one file per process (DDP ranks)
      path.replace(at, 2, std::to_string(getpid()));
    FILE* out = std::fopen(path.c_str(), "w");
    if (!out) return;
    std::fprintf(out, "self time of all recorded ops: %.1f ms\n%10s %10s %9s  caller > op\n", all, "self ms", "total ms",
                 "calls");
    for (size_t i = 0; i < rows.size() && i < 150; ++i)
      std::fprintf(out, "%10.1f %10.1f %9ld  %s\n", rows[i].second.self_ms, rows[i].second.total_ms, rows[i].second.calls,
                   rows[i].first.c_str());
    std::fclose(out);
  }
} profile;

}  // namespace
