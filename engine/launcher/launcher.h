#pragma once
// `engine launch` and its library twin engine::launch(): start one worker process per rank with
// the torchrun rendezvous environment, and bring the whole job down when one worker fails.
//
// Every worker gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NODE_RANK, MASTER_ADDR,
// MASTER_PORT, OMP_NUM_THREADS and ENGINE_THREADS (the CPU threads it should use), which
// detect_world() (engine/accelerator/world.h) reads back.
//
// What a job exposes: a single-node job (nnodes == 1) listens on no public address. Its ranks
// meet through a c10d FileStore in a private temporary directory (ENGINE_RENDEZVOUS_FILE, mode
// 0700, removed when the job ends) instead of a TCPStore, whose server would bind every
// interface; with the default master_addr (127.0.0.1) Gloo's transport binds loopback. Two local
// jobs therefore never collide. A multi-node job's rank 0 hosts the TCPStore on master_port
// (every interface: c10d cannot bind one) and Gloo binds the address this host's name resolves
// to, or GLOO_SOCKET_IFNAME's interface.
//
// Fail-fast: the first worker that exits non-zero or dies from a signal is reported, the others
// get SIGTERM, then SIGKILL after a 3 s grace; the launcher returns within seconds, never hangs.
#include <functional>
#include <string>
#include <vector>

namespace engine {

struct LaunchOptions {
  int nproc_per_node = 1;                 // workers started by this launcher (one per device)
  int nnodes = 1;                         // machines in the job
  int node_rank = 0;                      // this machine, 0..nnodes-1; ranks node_rank*nproc + i
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the TCPStore rendezvous
  int master_port = -1;                   // -1 = default: a free port on one node, 29500 across
                                          // nodes; 0 = pick a free port (only when nnodes == 1)
  int threads_per_process = 0;            // 0 = this machine's usable cores / nproc_per_node
};

/// Starts nproc_per_node copies of `child_argv` (argv[0] is a path for execv, typically
/// /proc/self/exe), each with the environment above added to the launcher's own. stdout/stderr
/// are inherited. SIGINT/SIGTERM received by the launcher are forwarded to the workers.
/// On a failure prints "engine launch: rank R exited with code C" (or "... killed by signal
/// SIGKILL") on stderr and returns 1 once every worker is gone; returns 128+sig when the launcher
/// was interrupted by SIGINT/SIGTERM, 0 when every worker succeeded.
/// Throws engine::UserError for invalid options (bad counts, node_rank >= nnodes, port 0 with
/// several nodes, empty argv); RunError when the private rendezvous directory cannot be made.
int launch_processes(const LaunchOptions& options, const std::vector<std::string>& child_argv);

/// Accelerate's notebook_launcher for C++ callers: runs `fn` on `num_processes` forked workers
/// (options.nproc_per_node is ignored; the other fields apply as above, port 0 = a free port).
/// Each worker sets the environment above with setenv() before calling fn, so fn can build an
/// Accelerator exactly as `engine run` does. In each worker fn runs on a thread of its own (an
/// OpenMP pool inherited across fork would hang it), so thread-local state of the caller (grad
/// mode, autocast) is not inherited: fn starts with LibTorch's defaults, as a fresh process would.
/// An exception escaping fn is printed by the worker as
/// "rank R: <what>" on stderr and makes it exit 1.
/// Returns 0 when every worker succeeded; otherwise throws engine::RunError
/// "rank R failed: <what>" (or "... killed by signal SIGKILL") naming the first failing rank --
/// engine::UserError instead when that rank's fn threw a UserError (bad input: exit code 2).
/// num_processes == 1 (one node) calls fn() in this process: environment untouched, exceptions
/// propagate unchanged.
/// Throws engine::UserError when num_processes < 1, for invalid options, and when CUDA is already
/// initialised in this process (a forked child cannot use CUDA: create CUDA state inside fn).
/// Not thread-safe: call it from one thread at a time.
int launch(const std::function<void()>& fn, int num_processes, const LaunchOptions& options = {});

/// True when this process may have initialised CUDA (so fork() would hand workers a broken CUDA
/// state). Decided without touching CUDA, since asking the CUDA runtime (cudaGetDeviceCount, which
/// at::globalContext().hasCUDA() calls) would itself initialise the driver and poison the fork.
/// Conservative: true as soon as the CUDA driver library (libcuda.so.1) is loaded into this
/// process, which the runtime does on its first call. Always false on CPU-only builds.
bool cuda_initialized();

/// A TCP port that was free a moment ago (bind to port 0 and read the kernel's choice).
int pick_free_port();

}  // namespace engine
