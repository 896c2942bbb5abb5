#pragma once
// An optimizer step that the ranks of a single-node DDP job can split between them (ZeRO stage 1):
// when the update of element i reads only element i of the gradients, parameters and moments
// (AdamW), rank r updates its share of the elements from the mean of every rank's gradients,
// writes the new parameters into every rank's buffer and keeps the new moments in its own: the
// buffers live in shared memory (Collectives::update_shared). The all-reduce and the update become
// one pass, and each rank updates 1/world of the parameters and moments instead of all of them.
// Afterwards every rank holds the same parameters as if each had all-reduced and stepped on its
// own, to the bit; each rank's moments are current in its own share only, until gather_shares();
// the gradients are left as they were (each rank's own, not the mean).
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace engine {

class ShardableStep {
 public:
  virtual ~ShardableStep() = default;
  /// Before a step, on every rank: true when this step can be split, with `buffers` set to the
  /// flat buffers it reads and writes (the gradients first), each a whole contiguous float32
  /// storage with one element per parameter element. Replicas decide alike.
  virtual bool begin_shared_step(std::vector<torch::Tensor>& buffers) = 0;
  /// The step, once on every rank after begin_shared_step returned true; rank q's share is
  /// [edges[q], edges[q + 1]), peers[k][q] is rank q's copy of buffer k. The share's elements are
  /// updated with gradient i = (sum over ranks q, in rank order, of peers[0][q][i]) * (1 / ranks)
  /// (the bits of Collectives::all_reduce_mean), from this rank's parameters and moments; the new
  /// parameters go to every rank's buffer, the new moments to this rank's. Per-step bookkeeping
  /// (step counts) advances on every rank for all parameters.
  virtual void step_shared(const std::vector<int64_t>& edges, const std::vector<std::vector<float*>>& peers,
                           int rank) = 0;
  /// Makes this rank's state whole after split steps: copies the other ranks' shares of the
  /// moments from their buffers (nothing to do otherwise). Call between steps (after a split step
  /// returned on this rank, before this rank enters the next), e.g. before reading the state for a
  /// checkpoint. The optimizer calls it itself before any step that is not split; in a DDP job
  /// the caller calls it earlier, before that step's all-reduce (Accelerator::step): after it, a
  /// peer may already be updating the share this reads.
  virtual void gather_shares() = 0;
};

}  // namespace engine
