// launch_processes() and launch(): the rendezvous environment and the two ways of starting
// workers (execv of a program, or fork running a function). Supervision is in workers.cpp.
#include "engine/launcher/launcher.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>
#include <utility>

#include "engine/core/cpu_threads.h"
#include "engine/core/errors.h"
#include "engine/core/preemption.h"
#include "engine/launcher/workers.h"

extern char** environ;

namespace engine {
namespace {

using launcher_detail::Outcome;
using launcher_detail::Worker;

using Env = std::vector<std::pair<std::string, std::string>>;

LaunchOptions validated(LaunchOptions o) {
  if (o.nproc_per_node < 1)
    throw UserError(fmt::format("launch: nproc_per_node must be >= 1 (got {})", o.nproc_per_node));
  if (o.nnodes < 1) throw UserError(fmt::format("launch: nnodes must be >= 1 (got {})", o.nnodes));
  if (o.node_rank < 0 || o.node_rank >= o.nnodes) {
    throw UserError(fmt::format("launch: node_rank {} must be in 0..{} (nnodes = {})", o.node_rank,
                                o.nnodes - 1, o.nnodes));
  }
  if (o.master_port < -1 || o.master_port > 65535) {
    throw UserError(fmt::format("launch: master_port {} is not a TCP port (0..65535)", o.master_port));
  }
  // Unset: a fixed default would make two local jobs collide; nodes need one agreed port.
  if (o.master_port == -1) o.master_port = o.nnodes == 1 ? 0 : 29500;
  if (o.master_port == 0 && o.nnodes > 1) {
    throw UserError(
        "launch: master_port 0 (pick a free port) works on one node only; with "
        "several nodes every node must be given the same explicit port");
  }
  if (o.threads_per_process < 0) {
    throw UserError(fmt::format("launch: threads_per_process must be >= 0 (got {})", o.threads_per_process));
  }
  if (o.master_addr.empty()) throw UserError("launch: master_addr is empty");
  if (o.master_port == 0) o.master_port = pick_free_port();
  if (o.threads_per_process == 0) o.threads_per_process = std::max(1, usable_cores() / o.nproc_per_node);
  return o;
}

// Removes the rendezvous directories in `parent` that this user's launchers left behind: a launcher
// killed by SIGKILL runs no destructor. A directory is stale when its `launcher` file names a process
// that no longer exists; one without that file (a launcher between mkdtemp and writing it) or whose
// process lives (or whose pid was reused) is kept.
void remove_stale_rendezvous(const std::string& parent) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    struct stat st {};
    if (name.rfind("engine-launch-", 0) != 0 || lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid())
      continue;
    std::ifstream in(entry.path() / "launcher");
    long pid = 0;
    if (!(in >> pid) || pid <= 0 || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code ignored;
    std::filesystem::remove_all(entry.path(), ignored);
  }
}

// A single-node job's rendezvous: a c10d FileStore in a directory only this user can read, so
// that nothing listens on a network port for it (a TCPStore server binds every interface).
// Removed with the job; the workers delete the store file itself when the last one closes it. The
// directory names its launcher's pid (file `launcher`), so that the next launch removes it when a
// SIGKILL took the launcher before it could (remove_stale_rendezvous).
class PrivateRendezvous {
 public:
  explicit PrivateRendezvous(const LaunchOptions& o) {
    if (o.nnodes != 1 || o.nproc_per_node * o.nnodes < 2) return;
    const char* tmp = std::getenv("TMPDIR");
    const std::string parent = tmp && *tmp ? tmp : "/tmp";
    remove_stale_rendezvous(parent);
    std::string pattern = parent + "/engine-launch-XXXXXX";
    if (!mkdtemp(pattern.data()))  // mode 0700
      throw RunError(fmt::format("launch: cannot create a rendezvous directory {}: {} (set TMPDIR to a writable directory)",
                                 pattern, std::strerror(errno)));
    dir_ = pattern;
    std::ofstream(dir_ + "/launcher") << getpid() << "\n";
  }
  ~PrivateRendezvous() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  PrivateRendezvous(const PrivateRendezvous&) = delete;
  PrivateRendezvous& operator=(const PrivateRendezvous&) = delete;
  /// "" for multi-node (and single-process) jobs: they rendezvous over TCP at MASTER_ADDR.
  std::string file() const { return dir_.empty() ? "" : dir_ + "/store"; }

 private:
  std::string dir_;
};

Env worker_env(const LaunchOptions& o, int local_rank, const std::string& rendezvous_file) {
  const int world = o.nproc_per_node * o.nnodes;
  const std::string threads = std::to_string(o.threads_per_process);
  Env env{{"RANK", std::to_string(o.node_rank * o.nproc_per_node + local_rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local_rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
          {"NODE_RANK", std::to_string(o.node_rank)},
          {"MASTER_ADDR", o.master_addr},
          {"MASTER_PORT", std::to_string(o.master_port)},
          {"OMP_NUM_THREADS", threads},
          {"ENGINE_THREADS", threads}};
  // Always set (empty = TCPStore), so a value inherited from an outer launcher cannot leak in.
  env.emplace_back("ENGINE_RENDEZVOUS_FILE", rendezvous_file);
  return env;
}

// The launcher's environment with `env` replacing same-named entries: built in the parent, so
// the child between fork and exec only calls execve (no allocation in a forked threaded process).
std::vector<std::string> merged_env(const Env& env) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    std::string name = entry.substr(0, entry.find('='));
    bool replaced = std::any_of(env.begin(), env.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) out.push_back(std::move(entry));
  }
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// spawn() failed part-way: the workers already started must not linger.
[[noreturn]] void abandon(std::vector<Worker>& workers, const std::string& what) {
  launcher_detail::stop_all(workers, /*grace_ms=*/0);
  throw RunError(what);
}

}  // namespace

int pick_free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw RunError(fmt::format("launch: socket(): {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);  // TCPStore's server binds every interface too
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    throw RunError(fmt::format("launch: cannot find a free port: {}", std::strerror(err)));
  }
  close(fd);  // never listened on, so the port is immediately reusable by rank 0's store
  return ntohs(addr.sin_port);
}

bool cuda_initialized() {
  // RTLD_NOLOAD only looks: it returns the library if it is already mapped, and never loads it.
  for (const char* lib : {"libcuda.so.1", "libcuda.so"}) {
    if (void* handle = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) {
      dlclose(handle);
      return true;
    }
  }
  return false;
}

int launch_processes(const LaunchOptions& options, const std::vector<std::string>& child_argv) {
  if (child_argv.empty()) throw UserError("launch: no program to run (empty argv)");
  const LaunchOptions o = validated(options);
  PrivateRendezvous rendezvous(o);
  std::vector<std::string> argv_strings = child_argv;
  std::vector<char*> argv = c_strings(argv_strings);
  launcher_detail::ReapableChildren reapable;
  std::vector<Worker> workers;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    std::vector<std::string> env_strings = merged_env(worker_env(o, local, rendezvous.file()));
    std::vector<char*> envp = c_strings(env_strings);
    pid_t pid = launcher_detail::spawn([&] {
      execve(argv[0], argv.data(), envp.data());
      // Only reached when exec failed: say why, with the exit code of "command not found".
      std::string msg = fmt::format("engine launch: cannot run {}: {}\n", argv[0], std::strerror(errno));
      (void)!write(STDERR_FILENO, msg.data(), msg.size());
      _exit(127);
    });
    if (pid < 0) abandon(workers, fmt::format("launch: fork failed: {}", std::strerror(errno)));
    workers.push_back({o.node_rank * o.nproc_per_node + local, pid, -1});
  }
  Outcome out = launcher_detail::supervise(workers);
  if (out.ok && out.preempted > 0) return preemption::kPreemptedExitCode;  // rank 0 said how to resume
  if (out.interrupted_by != 0) {
    std::cerr << "engine launch: interrupted by " << launcher_detail::signal_name(out.interrupted_by)
              << ", workers stopped\n";
    return 128 + out.interrupted_by;
  }
  if (!out.ok) {
    std::cerr << "engine launch: rank " << out.failed_rank << " " << out.how << "\n";
    return out.exit_code == 2 ? 2 : 1;  // a rank's bad input stays bad input
  }
  return 0;
}

int launch(const std::function<void()>& fn, int num_processes, const LaunchOptions& options) {
  if (num_processes < 1)
    throw UserError(fmt::format("launch: num_processes must be >= 1 (got {})", num_processes));
  if (cuda_initialized()) {
    throw UserError(
        "launch: CUDA is already initialised in this process, and forked workers cannot use it. "
        "Call engine::launch() before any CUDA call and create models and tensors on the GPU "
        "inside the launched function");
  }
  if (num_processes == 1 && options.nnodes == 1) {
    fn();
    return 0;
  }
  LaunchOptions requested = options;
  requested.nproc_per_node = num_processes;
  const LaunchOptions o = validated(requested);
  PrivateRendezvous rendezvous(o);
  launcher_detail::ReapableChildren reapable;
  std::vector<Worker> workers;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    const Env env = worker_env(o, local, rendezvous.file());
    int fds[2];
    if (pipe(fds) != 0) abandon(workers, fmt::format("launch: pipe failed: {}", std::strerror(errno)));
    pid_t pid = launcher_detail::spawn([&] {
      close(fds[0]);
      for (const auto& w : workers) close(w.report_fd);  // siblings' pipes are not ours
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      int code = 0;
      std::string what;
      // GNU libgomp is not fork-safe: the child inherits the OpenMP thread pool of the thread that
      // forked as a record of threads that do not exist here, and that thread's next parallel
      // region waits for them forever (seen with LibTorch 2.6, which runs ops on every core by
      // default; Debian's 1.13 starts with one thread, so its parent had no pool). A pool belongs
      // to the thread that started it: fn runs on a new thread, whose first parallel region starts
      // a pool of its own.
      std::thread([&] {
        try {
          fn();
        } catch (const UserError& e) {  // bad input stays bad input (exit 2) across the fork
          what = e.what();
          code = 2;
        } catch (const std::exception& e) {
          what = e.what();
          code = 1;
        } catch (...) {
          what = "unknown exception (not derived from std::exception)";
          code = 1;
        }
      }).join();
      if (code != 0) {
        std::cerr << "rank " << rank << ": " << what << std::endl;
        launcher_detail::write_report(fds[1], what);
      }
      std::cout.flush();
      std::fflush(nullptr);
      _exit(code);  // no atexit handlers or static destructors: they belong to the parent
    });
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      abandon(workers, fmt::format("launch: fork failed: {}", std::strerror(errno)));
    }
    workers.push_back({rank, pid, fds[0]});
  }
  Outcome out = launcher_detail::supervise(workers);
  for (auto& w : workers) close(w.report_fd);
  if (out.interrupted_by != 0) {
    throw RunError(fmt::format("launch: interrupted by {}; workers stopped",
                               launcher_detail::signal_name(out.interrupted_by)));
  }
  if (!out.ok) {
    std::string what =
        fmt::format("rank {} failed: {}", out.failed_rank, out.report.empty() ? out.how : out.report);
    if (out.exit_code == 2 && !out.report.empty()) throw UserError(what);
    throw RunError(what);
  }
  return 0;
}

}  // namespace engine
