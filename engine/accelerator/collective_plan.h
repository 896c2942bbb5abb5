#pragma once
// Backend-independent planning for the collectives in collectives.h: what every rank must agree
// on before any bytes move (shapes, dtypes, roots), and how many tensors become a few flat
// buffers (buckets). Gloo uses it today; an NCCL backend reuses it unchanged.
// Internal to engine/accelerator: the trainer talks to Collectives, never to this.
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <vector>

namespace engine {

/// The transport's all-gather of one small int64 row: [n] on every rank -> [world_size, n] in rank
/// order. Every rank must pass a row of the same length.
using GatherRows = std::function<torch::Tensor(const torch::Tensor& row)>;

/// 64 bits that change with the count, order, shape, dtype, layout or device of `tensors`: equal
/// on every rank exactly when the ranks pass the same list (up to a hash collision).
int64_t shapes_fingerprint(const std::vector<torch::Tensor>& tensors);

/// Makes sure every rank passes the same list: same count, and per tensor the same shape, dtype,
/// layout and device (and the same root; -1 when the op has none). Costs one all-gather of 4 int64
/// (a fingerprint of the whole list); only when fingerprints differ does a second gather fetch
/// every shape, so that all ranks throw the same RunError naming each rank's shape, e.g.
/// "all_reduce_sum: shape mismatch across ranks: rank 0 [64, 10], rank 1 [32, 10] (tensor 3 of 12)".
void check_same_shapes(const char* op, const std::vector<torch::Tensor>& tensors, int root,
                       const GatherRows& gather);

/// all_gather's check: dtype and every dim but dim 0 must match (at most kMaxGatherDims dims).
/// Returns each rank's dim-0 size, in rank order. One all-gather of kMaxGatherDims + 3 int64.
constexpr int kMaxGatherDims = 8;
std::vector<int64_t> check_gather_shapes(const torch::Tensor& tensor, const GatherRows& gather);

/// Tensors of one dtype and device, coalesced into one contiguous 1-d buffer (`flat`) so that the
/// transport makes one call per bucket instead of one per tensor (DDP's gradient buckets).
struct Bucket {
  std::vector<std::size_t> members;  // indices into the caller's list, in order
  int64_t numel = 0;                 // elements over all members
  torch::Tensor flat;                // the buffer the transport reads and writes (after pack())
  bool aliases = false;              // flat IS the single member's storage: nothing to copy back
};

/// Groups `tensors` by (dtype, device), first-seen order, and splits a group into buckets of at
/// most `max_bucket_bytes` (a bucket holds at least one tensor). Buffers are not allocated yet:
/// pack() each bucket just before handing it to the transport, so that packing bucket k+1
/// overlaps the transfer of bucket k. Throws std::invalid_argument for undefined or non-strided
/// (sparse) tensors.
std::vector<Bucket> make_buckets(const std::vector<torch::Tensor>& tensors, std::size_t max_bucket_bytes);

/// Sets `bucket.flat`: when the members are contiguous and lie back to back in memory (a lone
/// contiguous tensor, or views of one flat buffer) a view of that memory (aliases = true, zero
/// copies); else a new buffer holding the members' values (fill=true) or left uninitialised (a
/// broadcast's receivers). Not called for empty buckets (numel 0).
void pack(Bucket& bucket, const std::vector<torch::Tensor>& tensors, bool fill);

/// Copies a bucket's buffer back into its member tensors (in place; keeps their strides).
void unflatten(const Bucket& bucket, std::vector<torch::Tensor>& tensors);

}  // namespace engine
