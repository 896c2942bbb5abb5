#include "engine/data/sampler.h"

#include <algorithm>

#include "engine/core/rng.h"

namespace engine {

int64_t train_steps_per_epoch(size_t n_train, int64_t batch_size, int world, bool drop_last) {
  const int64_t global = batch_size * world;
  const int64_t n = static_cast<int64_t>(n_train);
  int64_t steps = n / global;
  int64_t rest = n % global;
  if (!drop_last && rest >= world) ++steps;  // the trimmed tail still gives every rank a sample
  return steps;
}

TrainShard train_shard(const std::vector<size_t>& train, uint64_t seed, int64_t epoch, int64_t batch_size,
                       int rank, int world, bool drop_last) {
  std::vector<size_t> perm = train;
  Rng rng(Rng::mix(seed, static_cast<uint64_t>(epoch), 0x5A3D1E));
  std::shuffle(perm.begin(), perm.end(), rng.engine());

  TrainShard shard;
  shard.batch_size = batch_size;
  shard.first = rank;
  shard.stride = world;
  shard.batches = train_steps_per_epoch(train.size(), batch_size, world, drop_last);
  const int64_t global = batch_size * world;
  for (int64_t b = 0; b < shard.batches; ++b) {
    int64_t begin = b * global;
    int64_t len = std::min<int64_t>(global, static_cast<int64_t>(perm.size()) - begin);
    len -= len % world;
    for (int64_t i = rank; i < len; i += world) shard.indices.push_back(perm[begin + i]);
  }
  return shard;
}

std::vector<size_t> eval_shard(const std::vector<size_t>& indices, int rank, int world) {
  const size_t n = indices.size();
  const size_t base = n / world, extra = n % world;
  const size_t begin = rank * base + std::min<size_t>(rank, extra);
  const size_t len = base + (static_cast<size_t>(rank) < extra ? 1 : 0);
  return {indices.begin() + begin, indices.begin() + begin + len};
}

}  // namespace engine
