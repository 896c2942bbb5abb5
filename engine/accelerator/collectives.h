#pragma once
// The collectives the engine needs, behind one small interface (STYLE.md habit 8: the accelerator
// is a seam). SingleProcess is the world-of-1 stub; Gloo (CPU) and NCCL (CUDA) are the real ones.
// Every call is made by every rank in the same order. A failing or dead peer makes the call throw
// (std::exception with the peer's rank where known) within the configured timeout: never a hang.
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/accelerator/world.h"

namespace engine {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In-place SUM over ranks. Shapes must match on every rank: a mismatch is an error naming
  /// each rank's shape (Accelerate's --debug), never a hang or silent garbage.
  virtual void all_reduce_sum(std::vector<torch::Tensor>& tensors) = 0;
  /// In-place MEAN over ranks: exactly all_reduce_sum, then every element times 1/size() (the
  /// DDP gradient average). Transports may fuse the two passes; the result is the same bits.
  virtual void all_reduce_mean(std::vector<torch::Tensor>& tensors) {
    all_reduce_sum(tensors);
    const double inv = 1.0 / size();
    for (auto& t : tensors) t.mul_(inv);
  }
  /// Every rank's tensor, in rank order. Dim 0 may differ between ranks; other dims must match.
  virtual std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) = 0;
  /// Overwrites `tensors` on every rank with root's values (initial weights come from rank 0).
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int root) = 0;
  virtual void barrier() = 0;

  /// peers[i][q]: rank q's copy of buffer i, mapped into this process.
  using PeerBuffers = std::vector<std::vector<float*>>;
  /// An element-wise update split over the ranks of a single-node job whose memory they share
  /// (the DDP optimizer step, accelerator.cpp). Moves each of `buffers` (whole contiguous float32
  /// storages, the same sizes on every rank, the same numel each) into shared memory every rank
  /// maps, once: their views follow, and later calls with the same storages find them there. Then
  /// waits for every rank, calls update(edges, peers), where rank q's share of the elements is
  /// [edges[q], edges[q + 1]) (rank order, balanced, the same on every call with the same sizes), and
  /// waits for every rank again: what any rank wrote before the call is visible to every update,
  /// and what every update wrote, to every rank after the call. Returns false, without calling
  /// update, on every rank when this cannot be done: another transport (the default), buffers that
  /// differ between ranks or an empty list on any rank, /dev/shm full.
  /// Collective: every rank calls it (with an empty list when it has nothing to share).
  using SharedUpdate = std::function<void(const std::vector<int64_t>& edges, const PeerBuffers& peers)>;
  virtual bool update_shared(const std::vector<torch::Tensor>& buffers, const SharedUpdate& update) {
    (void)buffers, (void)update;
    return false;
  }
};

/// world_size 1: every collective is the identity.
std::unique_ptr<Collectives> make_single_process_collectives();

/// c10d TCPStore rendezvous at world.master_addr:master_port (rank 0 hosts the store) and a
/// ProcessGroupGloo; `timeout` bounds every collective and the rendezvous itself.
std::unique_ptr<Collectives> make_gloo_collectives(const WorldInfo& world, std::chrono::milliseconds timeout);

/// c10d TCPStore rendezvous and a ProcessGroupNCCL on cuda:<local_rank> (made the current device
/// first); CPU tensors are staged through the device. Builds without NCCL throw UserError.
std::unique_ptr<Collectives> make_nccl_collectives(const WorldInfo& world, std::chrono::milliseconds timeout);

}  // namespace engine
