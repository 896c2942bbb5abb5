// launch_processes() with /bin/sh workers and launch() with forked functions: environment,
// success, fail-fast (exit code, signal, exception), signal forwarding and option errors.
#include "engine/launcher/launcher.h"

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/core/errors.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/timing.h"

using engine::test::read_env;

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using engine::test::seconds_since;

int run_sh(const std::string& script, engine::LaunchOptions o = {}) {
  if (o.master_port == 29500) o.master_port = 0;
  if (o.nproc_per_node == 1) o.nproc_per_node = 2;
  return engine::launch_processes(o, {"/bin/sh", "-c", script});
}

}  // namespace

TEST_CASE("launch_processes: every worker succeeds -> 0") { CHECK(run_sh("exit 0") == 0); }

TEST_CASE("launch_processes: each worker sees its rendezvous environment") {
  std::string dir = engine::test::temp_dir("launch_env");
  engine::LaunchOptions o;
  o.threads_per_process = 3;
  REQUIRE(run_sh("env > " + dir + "/env_$RANK", o) == 0);
  auto e0 = read_env(dir + "/env_0");
  auto e1 = read_env(dir + "/env_1");
  for (int r = 0; r < 2; ++r) {
    auto& e = r == 0 ? e0 : e1;
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["LOCAL_RANK"] == std::to_string(r));
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["LOCAL_WORLD_SIZE"] == "2");
    CHECK(e["NODE_RANK"] == "0");
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(e["OMP_NUM_THREADS"] == "3");
    CHECK(e["ENGINE_THREADS"] == "3");
    CHECK(e.count("PATH") == 1);  // the launcher's own environment is kept
  }
  int port = std::atoi(e0["MASTER_PORT"].c_str());
  CHECK(port > 0);
  CHECK(e1["MASTER_PORT"] == e0["MASTER_PORT"]);
}

TEST_CASE("launch_processes: the second node's ranks follow the first node's") {
  std::string dir = engine::test::temp_dir("launch_node");
  engine::LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 1;
  o.master_port = 29999;
  REQUIRE(engine::launch_processes(o, {"/bin/sh", "-c", "env > " + dir + "/env_$LOCAL_RANK"}) == 0);
  auto e = read_env(dir + "/env_0");
  CHECK(e["RANK"] == "1");
  CHECK(e["WORLD_SIZE"] == "2");
  CHECK(e["NODE_RANK"] == "1");
  CHECK(e["MASTER_PORT"] == "29999");
}

TEST_CASE("launch_processes: one worker fails -> 1 within seconds and the others are gone") {
  std::string dir = engine::test::temp_dir("launch_fail");
  auto t0 = Clock::now();
  // `exec` makes the sleeper the worker itself (not a grandchild of sh), so its pid is the one.
  int rc = run_sh("if [ \"$RANK\" = 1 ]; then sleep 0.2; exit 3; fi; echo $$ > " + dir +
                  "/sleeper; exec sleep 60");
  CHECK(rc == 1);
  CHECK(seconds_since(t0) < 10.0);
  std::ifstream in(dir + "/sleeper");
  pid_t sleeper = 0;
  in >> sleeper;
  REQUIRE(sleeper > 0);
  CHECK(kill(sleeper, 0) == -1);  // reaped: no such process
  CHECK(errno == ESRCH);
}

TEST_CASE("launch_processes: a worker killed by a signal, or a program that cannot run -> 1") {
  CHECK(run_sh("if [ \"$RANK\" = 0 ]; then kill -9 $$; fi; exec sleep 60") == 1);
  engine::LaunchOptions o;
  o.master_port = 0;
  CHECK(engine::launch_processes(o, {"/nonexistent/program"}) == 1);
}

TEST_CASE("launch_processes: SIGTERM sent to the launcher is forwarded to the workers") {
  auto t0 = Clock::now();
  std::thread sender([] {
    std::this_thread::sleep_for(500ms);
    kill(getpid(), SIGTERM);
  });
  int rc = run_sh("exec sleep 60");
  sender.join();
  CHECK(rc == 128 + SIGTERM);
  CHECK(seconds_since(t0) < 5.0);
}

TEST_CASE("launch_processes: the rendezvous directory goes with the job, and a SIGKILLed launcher's with the next job") {
  // TMPDIR holds the rendezvous directories: a scratch one here, with three left as if by other
  // launchers: one killed (its pid gone), one alive (this process), one still being set up (no pid yet).
  const std::string tmp = engine::test::temp_dir("launch_rendezvous");
  pid_t gone = fork();
  REQUIRE(gone >= 0);
  if (gone == 0) _exit(0);
  REQUIRE(waitpid(gone, nullptr, 0) == gone);
  for (const auto& [name, pid] : std::map<std::string, long>{{"engine-launch-killed", gone}, {"engine-launch-alive", getpid()}}) {
    std::filesystem::create_directory(tmp + "/" + name);
    std::ofstream(tmp + "/" + name + "/store") << "x";
    std::ofstream(tmp + "/" + name + "/launcher") << pid << "\n";
  }
  std::filesystem::create_directory(tmp + "/engine-launch-starting");
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  // The workers see their job's own directory, named after this launcher.
  const int rc = run_sh("cat \"$(dirname \"$ENGINE_RENDEZVOUS_FILE\")/launcher\" > " + tmp + "/seen_$RANK");
  if (old) setenv("TMPDIR", saved.c_str(), 1); else unsetenv("TMPDIR");
  CHECK(rc == 0);
  CHECK(engine::test::read_text(tmp + "/seen_0") == std::to_string(getpid()) + "\n");
  CHECK_FALSE(std::filesystem::exists(tmp + "/engine-launch-killed"));
  CHECK(std::filesystem::exists(tmp + "/engine-launch-alive/store"));
  CHECK(std::filesystem::exists(tmp + "/engine-launch-starting"));
  int left = 0;  // the job's own directory is gone after it
  for (const auto& e : std::filesystem::directory_iterator(tmp)) left += e.path().filename().string().rfind("engine-launch-", 0) == 0;
  CHECK(left == 2);
}

TEST_CASE("launch_processes: invalid options are user errors") {
  engine::LaunchOptions o;
  o.nnodes = 2;
  o.node_rank = 2;
  CHECK_THROWS_AS(engine::launch_processes(o, {"/bin/true"}), engine::UserError);
  o.node_rank = 0;
  o.master_port = 0;
  CHECK_THROWS_AS(engine::launch_processes(o, {"/bin/true"}), engine::UserError);
  CHECK_THROWS_AS(engine::launch_processes({}, {}), engine::UserError);
  CHECK_THROWS_AS(engine::launch([] {}, 0), engine::UserError);
}

TEST_CASE("launch: one process runs fn here, with the environment untouched") {
  CHECK_FALSE(engine::cuda_initialized());
  int calls = 0;
  const char* rank_before = std::getenv("RANK");
  CHECK(engine::launch([&] { ++calls; }, 1) == 0);
  CHECK(calls == 1);
  CHECK(std::getenv("RANK") == rank_before);
  CHECK_THROWS_WITH_AS(engine::launch([] { throw std::runtime_error("inline"); }, 1), "inline",
                       std::runtime_error);
}

TEST_CASE("launch: two forked workers see their ranks and success returns 0") {
  std::string dir = engine::test::temp_dir("launch_fn");
  engine::LaunchOptions o;
  o.master_port = 0;
  CHECK(engine::launch(
            [&] {
              std::ofstream(dir + "/rank_" + std::getenv("RANK"))
                  << std::getenv("WORLD_SIZE") << " " << std::getenv("LOCAL_RANK") << " "
                  << std::getenv("MASTER_PORT");
            },
            2, o) == 0);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/rank_" + std::to_string(r));
    int world = 0, local = -1, port = 0;
    in >> world >> local >> port;
    CHECK(world == 2);
    CHECK(local == r);
    CHECK(port > 0);
  }
}

TEST_CASE("launch: a worker that throws makes launch throw RunError naming that rank, fast") {
  engine::LaunchOptions o;
  o.master_port = 0;
  auto t0 = Clock::now();
  CHECK_THROWS_WITH_AS(engine::launch(
                           [] {
                             if (std::string(std::getenv("RANK")) == "1") throw std::runtime_error("boom");
                             std::this_thread::sleep_for(60s);  // stopped by the fail-fast SIGTERM
                           },
                           2, o),
                       "rank 1 failed: boom", engine::RunError);
  CHECK(seconds_since(t0) < 5.0);
}

TEST_CASE("launch: a worker's bad-input error stays a UserError (exit code 2 for the caller)") {
  engine::LaunchOptions o;
  o.master_port = 0;
  CHECK_THROWS_WITH_AS(engine::launch(
                           [] {
                             if (std::string(std::getenv("RANK")) == "1") throw engine::UserError("bad recipe");
                             std::this_thread::sleep_for(60s);
                           },
                           2, o),
                       "rank 1 failed: bad recipe", engine::UserError);
}
