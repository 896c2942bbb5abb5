#pragma once
// Which samples each rank sees (DESIGN.md, accelerator layer).
//
// Training: every epoch is a permutation of the training indices drawn from (seed, epoch). It is
// cut into global batches of batch_size * world; rank r takes positions r, r+world, ... of each
// global batch, so N ranks x batch b see exactly the samples 1 rank x batch N*b sees, step for
// step. The last, incomplete global batch is dropped when drop_last, otherwise trimmed to a
// multiple of the world size (every rank must run the same number of steps with equal shares, so
// that averaging gradients equals the single-process mean). At most world-1 samples an epoch are
// skipped that way, and a different few each epoch.
//
// Evaluation: no shuffle, no padding. Rank r takes a contiguous shard (sizes differ by at most
// one); gathering the shards in rank order gives back dataset order, every sample exactly once.
#include <cstdint>
#include <vector>

namespace engine {

struct TrainShard {
  std::vector<size_t> indices;  // this rank's samples for the epoch, in step order
  int64_t batches = 0;          // steps this epoch (the same on every rank)
  int64_t batch_size = 0;       // per-rank batch size (the last batch may be smaller)
  // Local sample j of every batch is position first + j * stride of the global batch (rank, world):
  // what per-sample random draws are keyed by (engine/core/sample_draws.h).
  int64_t first = 0;
  int64_t stride = 1;
};

TrainShard train_shard(const std::vector<size_t>& train, uint64_t seed, int64_t epoch, int64_t batch_size,
                       int rank, int world, bool drop_last);

/// Contiguous, unpadded evaluation shard of rank r.
std::vector<size_t> eval_shard(const std::vector<size_t>& indices, int rank, int world);

/// Number of optimizer steps per epoch (what schedulers and progress bars need up front).
int64_t train_steps_per_epoch(size_t n_train, int64_t batch_size, int world, bool drop_last);

}  // namespace engine
