// detect_world(): the job's shape from the environment (see world.h for the variables read).
#include "engine/accelerator/world.h"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/errors.h"

namespace engine {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;  // `FOO=` counts as unset, like torchrun
  return std::string(v);
}

// Strict parsing: "2x", " 1" or "" are errors, never a silent 0 (std::atoi would accept them).
int parse_int(const char* name, const std::string& text, int min_value) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || v < min_value || v > INT_MAX) {
    throw UserError(
        fmt::format("environment variable {}=\"{}\" is not an integer >= {}", name, text, min_value));
  }
  return static_cast<int>(v);
}

std::optional<int> env_int(const char* name, int min_value) {
  auto v = env(name);
  if (!v) return std::nullopt;
  return parse_int(name, *v, min_value);
}

// SLURM_TASKS_PER_NODE is a compressed list, e.g. "2(x3),1": 2 tasks on each of nodes 0..2, then
// 1 on node 3. Returns the count for `node`.
int slurm_tasks_on_node(const std::string& text, int node) {
  const char* name = "SLURM_TASKS_PER_NODE";
  int first = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    int count = 1;
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw UserError(fmt::format("{}=\"{}\" is malformed", name, text));
      count = parse_int(name, item.substr(paren + 2, item.size() - paren - 3), 1);
      item = item.substr(0, paren);
    }
    int tasks = parse_int(name, item, 1);
    if (node < first + count) return tasks;
    first += count;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  throw UserError(fmt::format("{}=\"{}\" lists no entry for node {}", name, text, node));
}

void validate(const WorldInfo& w, const char* rank_var, const char* size_var) {
  if (w.rank >= w.world_size) {
    throw UserError(fmt::format("{}={} must be smaller than {}={} (ranks are 0..{})", rank_var, w.rank,
                                size_var, w.world_size, w.world_size - 1));
  }
  if (w.local_rank >= w.local_world_size) {
    throw UserError(fmt::format("local rank {} must be smaller than the local world size {}", w.local_rank,
                                w.local_world_size));
  }
  if (w.local_world_size > w.world_size) {
    throw UserError(
        fmt::format("local world size {} exceeds the world size {}", w.local_world_size, w.world_size));
  }
  if (w.master_port < 1 || w.master_port > 65535) {
    throw UserError(fmt::format("MASTER_PORT={} is not a TCP port (1..65535)", w.master_port));
  }
}

// torchrun / engine launch: RANK and WORLD_SIZE are the contract; the LOCAL_* values default to
// a single node (the common hand-written `RANK=1 WORLD_SIZE=2 engine run ...` case).
WorldInfo from_torchrun() {
  auto rank = env_int("RANK", 0);
  auto size = env_int("WORLD_SIZE", 1);
  if (!rank || !size) {
    throw UserError(fmt::format("RANK and WORLD_SIZE must be set together (found only {})",
                                rank ? "RANK" : "WORLD_SIZE"));
  }
  WorldInfo w;
  w.rank = *rank;
  w.world_size = *size;
  w.local_rank = env_int("LOCAL_RANK", 0).value_or(w.rank);
  w.local_world_size = env_int("LOCAL_WORLD_SIZE", 1).value_or(w.world_size);
  // engine launch sets NODE_RANK; torchrun calls the same thing GROUP_RANK.
  auto node = env_int("NODE_RANK", 0);
  if (!node) node = env_int("GROUP_RANK", 0);
  w.node_rank = node.value_or(w.rank / w.local_world_size);
  w.master_addr = env("MASTER_ADDR").value_or("127.0.0.1");
  w.master_port = env_int("MASTER_PORT", 0).value_or(29500);
  w.rendezvous_file = env("ENGINE_RENDEZVOUS_FILE").value_or("");
  validate(w, "RANK", "WORLD_SIZE");
  return w;
}

// Slurm (`srun engine run ...`): one task per process. Slurm has no rendezvous address of its own;
// MASTER_ADDR wins, else the node srun was launched from, else loopback when the job has one node.
WorldInfo from_slurm() {
  WorldInfo w;
  w.rank = *env_int("SLURM_PROCID", 0);
  auto ntasks = env_int("SLURM_NTASKS", 1);
  if (!ntasks) throw UserError("SLURM_PROCID is set but SLURM_NTASKS is not");
  w.world_size = *ntasks;
  w.local_rank = env_int("SLURM_LOCALID", 0).value_or(0);
  w.node_rank = env_int("SLURM_NODEID", 0).value_or(0);
  if (auto per_node = env_int("SLURM_NTASKS_PER_NODE", 1)) {
    w.local_world_size = *per_node;
  } else if (auto list = env("SLURM_TASKS_PER_NODE")) {
    w.local_world_size = slurm_tasks_on_node(*list, w.node_rank);
  } else {
    w.local_world_size = w.world_size;
  }
  int nnodes = env_int("SLURM_NNODES", 1).value_or(1);
  if (auto addr = env("MASTER_ADDR")) {
    w.master_addr = *addr;
  } else if (auto launch_node = env("SLURM_LAUNCH_NODE_IPADDR")) {
    w.master_addr = *launch_node;
  } else if (nnodes > 1 && w.world_size > 1) {
    throw UserError(
        fmt::format("Slurm job on {} nodes: set MASTER_ADDR to the first node's address, e.g. "
                    "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)",
                    nnodes));
  }
  w.master_port = env_int("MASTER_PORT", 0).value_or(29500);
  validate(w, "SLURM_PROCID", "SLURM_NTASKS");
  return w;
}

}  // namespace

WorldInfo detect_world() {
  // torchrun's variables win over Slurm's: `engine launch` inside an sbatch allocation sets them.
  if (env("RANK") || env("WORLD_SIZE")) return from_torchrun();
  if (env("SLURM_PROCID")) return from_slurm();
  return WorldInfo{};
}

}  // namespace engine
