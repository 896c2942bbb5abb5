// Local jobs neither collide nor listen to the world: a single-node launch picks its own port,
// meets through a private FileStore instead of a TCPStore (whose server binds every interface),
// and its ranks' listening sockets (Gloo's) are on loopback. Two real `engine launch -n 2` jobs
// run at once on this machine while the test reads their sockets from /proc.
#include <dirent.h>
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/launcher/launcher.h"
#include "tests/support/files.h"
#include "tests/support/paths.h"
#include "tests/support/run_command.h"

using namespace engine::test;

namespace {

// Every process whose parent is `root`, and theirs, from /proc/*/stat.
std::set<int> descendants(int root) {
  std::map<int, std::vector<int>> children;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      int pid = std::atoi(e->d_name);
      if (pid <= 0) continue;
      std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
      auto close_paren = stat.rfind(')');
      if (close_paren == std::string::npos) continue;
      std::istringstream rest(stat.substr(close_paren + 1));
      std::string state;
      int ppid = 0;
      rest >> state >> ppid;
      children[ppid].push_back(pid);
    }
    closedir(d);
  }
  std::set<int> out;
  std::vector<int> todo{root};
  while (!todo.empty()) {
    int p = todo.back();
    todo.pop_back();
    for (int c : children[p])
      if (out.insert(c).second) todo.push_back(c);
  }
  return out;
}

// Socket inodes held open by `pid`.
std::set<std::string> socket_inodes(int pid) {
  std::set<std::string> out;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fd_dir, ec)) {
    std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) out.insert(target.substr(8, target.size() - 9));
  }
  return out;
}

// Listening TCP sockets (state 0A) of /proc/net/tcp and tcp6: inode -> hex local address.
std::map<std::string, std::string> listening_sockets() {
  std::map<std::string, std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode;
      if (st == "0A") out[inode] = local.substr(0, local.find(':'));
    }
  }
  return out;
}

bool is_loopback_hex(const std::string& hex) {
  return hex == "0100007F" ||                          // 127.0.0.1
         hex == "00000000000000000000000001000000" ||  // ::1
         hex == "0000000000000000FFFF00000100007F";    // ::ffff:127.0.0.1
}

}  // namespace

TEST_CASE("a single-node launch rendezvouses in a private directory, on a port of its own") {
  const std::string dir = temp_dir("local_job_env");
  engine::LaunchOptions o;
  o.nproc_per_node = 2;  // master_port left unset: the launcher picks a free one
  REQUIRE(engine::launch_processes(
              o, {"/bin/sh", "-c",
                  "env > " + dir + "/env_$RANK; stat -c %a \"$(dirname \"$ENGINE_RENDEZVOUS_FILE\")\" > " + dir +
                      "/mode_$RANK"}) == 0);
  auto e0 = read_env(dir + "/env_0"), e1 = read_env(dir + "/env_1");
  const std::string file = e0["ENGINE_RENDEZVOUS_FILE"];
  CHECK(!file.empty());
  CHECK(e1["ENGINE_RENDEZVOUS_FILE"] == file);
  CHECK(read_text(dir + "/mode_0") == "700\n");  // only this user can reach the store
  CHECK_FALSE(std::filesystem::exists(std::filesystem::path(file).parent_path()));  // removed with the job
  CHECK(e0["MASTER_PORT"] == e1["MASTER_PORT"]);
  CHECK(e0["MASTER_PORT"] != "29500");  // a fixed default is what made two local jobs collide

  // A multi-node job keeps the TCP rendezvous at MASTER_ADDR:29500 (every node must agree on it).
  engine::LaunchOptions multi;
  multi.nnodes = 2;
  multi.master_addr = "10.1.2.3";
  REQUIRE(engine::launch_processes(multi, {"/bin/sh", "-c", "env > " + dir + "/multi_env"}) == 0);
  auto m = read_env(dir + "/multi_env");
  CHECK(m["MASTER_PORT"] == "29500");
  CHECK(m["MASTER_ADDR"] == "10.1.2.3");
  CHECK(m["ENGINE_RENDEZVOUS_FILE"].empty());
}

TEST_CASE("two local engine launch -n 2 jobs at once both finish, listening on loopback only") {
  mnist_file("train.csv");
  const std::string dir = temp_dir("local_jobs");
  struct Job {
    std::string name;
    CommandResult result;
    std::atomic<bool> done{false};
    int launcher_pid = 0;
  };
  Job jobs[2];
  jobs[0].name = "a";
  jobs[1].name = "b";
  std::vector<std::thread> threads;
  for (auto& job : jobs) {
    threads.emplace_back([&job, &dir] {
      // `exec` keeps the shell's pid for the launcher, so the test can find its ranks.
      job.result = run_command("cd " + source_path("") + " && echo $$ > " + dir + "/" + job.name + ".pid && exec " +
                               engine_binary() +
                               " launch -n 2 recipes/mnist_convnext.toml --set train.max_steps=2"
                               " --set data.split.max_train=128 --set data.split.max_valid=32 --set predict.limit=8"
                               " --set run.output_dir=" + dir + "/run_" + job.name);
      job.done = true;
    });
  }
  // While the jobs run, collect every listening socket their processes hold.
  std::map<std::string, std::string> seen;  // inode -> local address
  while (!(jobs[0].done && jobs[1].done)) {
    auto listening = listening_sockets();
    for (auto& job : jobs) {
      if (job.launcher_pid == 0) job.launcher_pid = std::atoi(read_text(dir + "/" + job.name + ".pid").c_str());
      if (job.launcher_pid == 0) continue;
      std::set<int> procs = descendants(job.launcher_pid);
      procs.insert(job.launcher_pid);
      for (int pid : procs)
        for (const auto& inode : socket_inodes(pid))
          if (listening.count(inode)) seen[inode] = listening[inode];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : threads) t.join();
  for (auto& job : jobs) {
    CHECK_MESSAGE(job.result.exit_code == 0, "job " << job.name << ":\n" << job.result.output);
    CHECK(std::filesystem::exists(dir + "/run_" + job.name + "/model.safetensors"));
  }
  // A TCPStore server would listen on [::] for the whole job; Gloo's pairs listen on loopback
  // only while they connect (the listener may be gone before a poll sees it, so none is required).
  for (const auto& [inode, addr] : seen) CHECK_MESSAGE(is_loopback_hex(addr), "socket " << inode << " listens on " << addr);
}
