#pragma once
// Who am I in the job: rank, world size and rendezvous address, from the launcher's environment.
#include <string>

namespace engine {

struct WorldInfo {
  int rank = 0;               // global rank, 0..world_size-1; rank 0 is the main process
  int world_size = 1;
  int local_rank = 0;         // rank on this node (selects the CUDA device)
  int local_world_size = 1;   // processes on this node (splits CPU threads)
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string rendezvous_file;  // ENGINE_RENDEZVOUS_FILE: a single-node `engine launch` job meets
                                // through this c10d FileStore (nothing listens); "" = TCPStore at
                                // master_addr:master_port
  bool distributed() const { return world_size > 1; }
};

/// Reads the job's environment: engine launch / torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and engine launch's ENGINE_RENDEZVOUS_FILE) or Slurm (SLURM_PROCID, SLURM_NTASKS,
/// SLURM_LOCALID, SLURM_NTASKS_PER_NODE / SLURM_TASKS_PER_NODE, SLURM_NODEID). No variables -> a
/// single process. Inconsistent values (RANK >= WORLD_SIZE, bad numbers) -> UserError.
WorldInfo detect_world();

}  // namespace engine
