// detect_world(): torchrun / engine launch variables, Slurm variables, and the errors for bad ones.
#include "engine/accelerator/world.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "engine/core/errors.h"

namespace {

// Clears every variable detect_world() reads, sets the given ones, restores all on exit, so a
// test never depends on (or leaks into) the environment it was started from.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& set) {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      unsetenv(name);
    }
    for (const auto& [k, v] : set) setenv(k.c_str(), v.c_str(), 1);
  }
  ~Env() {
    for (const auto& [k, v] : saved_) {
      if (v)
        setenv(k.c_str(), v->c_str(), 1);
      else
        unsetenv(k.c_str());
    }
  }

 private:
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "NODE_RANK",
                                           "GROUP_RANK",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NODEID",
                                           "SLURM_NTASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_NNODES",
                                           "SLURM_LAUNCH_NODE_IPADDR"};
  std::map<std::string, std::optional<std::string>> saved_;
};

std::string error_of(const std::map<std::string, std::string>& vars) {
  Env env(vars);
  try {
    engine::detect_world();
  } catch (const engine::UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("detect_world: no variables is a single process") {
  Env env({});
  engine::WorldInfo w = engine::detect_world();
  CHECK(w.rank == 0);
  CHECK(w.world_size == 1);
  CHECK_FALSE(w.distributed());
}

TEST_CASE("detect_world: torchrun / engine launch variables") {
  Env env({{"RANK", "3"},
           {"WORLD_SIZE", "4"},
           {"LOCAL_RANK", "1"},
           {"LOCAL_WORLD_SIZE", "2"},
           {"GROUP_RANK", "1"},
           {"MASTER_ADDR", "10.0.0.5"},
           {"MASTER_PORT", "1234"},
           {"SLURM_PROCID", "0"},
           {"SLURM_NTASKS", "1"}});  // torchrun wins over Slurm
  engine::WorldInfo w = engine::detect_world();
  CHECK(w.rank == 3);
  CHECK(w.world_size == 4);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.node_rank == 1);
  CHECK(w.master_addr == "10.0.0.5");
  CHECK(w.master_port == 1234);
  CHECK(w.distributed());
}

TEST_CASE("detect_world: RANK and WORLD_SIZE alone mean one node") {
  Env env({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  engine::WorldInfo w = engine::detect_world();
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.node_rank == 0);
  CHECK(w.master_addr == "127.0.0.1");
  CHECK(w.master_port == 29500);
}

TEST_CASE("detect_world: Slurm variables") {
  Env env({{"SLURM_PROCID", "5"},
           {"SLURM_NTASKS", "8"},
           {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "2"},
           {"SLURM_TASKS_PER_NODE", "2(x4)"},
           {"SLURM_NNODES", "4"},
           {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}});
  engine::WorldInfo w = engine::detect_world();
  CHECK(w.rank == 5);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.node_rank == 2);
  CHECK(w.master_addr == "10.1.2.3");
  CHECK(w.master_port == 29500);
}

TEST_CASE("detect_world: Slurm's compressed tasks-per-node list") {
  Env env({{"SLURM_PROCID", "5"},
           {"SLURM_NTASKS", "7"},
           {"SLURM_LOCALID", "0"},
           {"SLURM_NODEID", "2"},
           {"SLURM_TASKS_PER_NODE", "3,2(x2)"},
           {"SLURM_NNODES", "3"},
           {"MASTER_ADDR", "node0"}});
  engine::WorldInfo w = engine::detect_world();
  CHECK(w.local_world_size == 2);
  CHECK(w.master_addr == "node0");
}

TEST_CASE("detect_world: errors name the variable and its value") {
  std::string e = error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  CHECK(e.find("RANK=2") != std::string::npos);
  CHECK(e.find("WORLD_SIZE=2") != std::string::npos);

  e = error_of({{"RANK", "1x"}, {"WORLD_SIZE", "2"}});
  CHECK(e.find("RANK=\"1x\"") != std::string::npos);

  e = error_of({{"RANK", "-1"}, {"WORLD_SIZE", "2"}});
  CHECK(e.find("RANK=\"-1\"") != std::string::npos);

  e = error_of({{"RANK", "0"}});
  CHECK(e.find("WORLD_SIZE") != std::string::npos);

  e = error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  CHECK(e.find("MASTER_PORT=70000") != std::string::npos);

  e = error_of({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}});
  CHECK(e.find("SLURM_PROCID=4") != std::string::npos);

  e = error_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}});
  CHECK(e.find("MASTER_ADDR") != std::string::npos);
}
