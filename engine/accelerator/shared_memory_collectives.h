#pragma once
// The gradient all-reduce of a single-node CPU job through shared memory instead of Gloo's TCP
// loopback. Measured on 2 cores (2 processes, 13.5 MB = convnext_atto's gradients): Gloo 14.4 ms
// per all-reduce, the kernel copying every byte through sockets; here each byte is copied into
// shared memory once, summed once by the rank that owns its chunk, and copied back once (~9 ms).
// The gradient buffer of every step (one whole storage of >= 1 MiB, passed again: FlatAdamW's
// arena) does better: on its second call each rank moves that storage into a shared-memory object
// every rank maps (its views, the parameters' .grad, follow), and from then on each rank sums its
// chunk of all ranks' buffers and writes the result into all of them: one pass, ~2.6 ms for the
// mean (bench/allreduce.cpp on the 2-core AMD EPYC; ENGINE_SHM_ARENA=0 keeps the copying path).
#include <chrono>
#include <memory>

#include "engine/accelerator/collectives.h"

namespace engine {

/// Wraps `inner` (Gloo) so that all_reduce_sum of float32/float64 CPU tensors runs through POSIX
/// shared memory (/dev/shm) when every rank is on this node and the job was started by
/// `engine launch` / `engine run` (their private rendezvous names the job). Everything else, and
/// any call whose tensors differ between ranks (so that Gloo's checks name each rank's shapes), goes
/// to `inner`. Returns `inner` unchanged when shared memory does not apply or cannot be set up on
/// every rank (e.g. no /dev/shm), or when ENGINE_SHM_ALLREDUCE=0.
///
/// update_shared (collectives.h) runs here too: the DDP optimizer step split over the ranks
/// (components/optimizers/shardable_step.h), the optimizer's buffers moved into shared memory the
/// same way as the gradient buffer; each rank sums the gradients of its share and updates it.
///
/// Same contract as collectives.h: sums are exact per element and identical on every rank
/// (element i is summed in rank order by one rank); a rank that dies or stops answering makes the
/// others throw RunError within `timeout` (a dead process is noticed within ~0.1 s).
/// Collective: every rank calls it, in the same order as the other collectives.
std::unique_ptr<Collectives> with_shared_memory_all_reduce(std::unique_ptr<Collectives> inner, const WorldInfo& world,
                                                           std::chrono::milliseconds timeout);

}  // namespace engine
