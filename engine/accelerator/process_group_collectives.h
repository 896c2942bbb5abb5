#pragma once
// Collectives over a c10d process group: the logic gloo_collectives.cpp and nccl_collectives.cpp
// share (the contract is collectives.h; the agreement checks and buckets are collective_plan.h).
// `Group` is c10d::ProcessGroupGloo or c10d::ProcessGroupNCCL: on LibTorch 1.13 and 2.x both offer
// broadcast / allreduce / allgather / barrier returning intrusive_ptr<Work> (1.13: a ProcessGroup;
// 2.x: a Backend). A backend derives from ProcessGroupCollectives<Group>, creates its group with
// rendezvous() in its constructor, and overrides the hooks below where it differs (NCCL stages CPU
// tensors through its CUDA device).
// Internal to engine/accelerator: include it after the backend's ProcessGroup*.hpp.
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "engine/accelerator/collective_plan.h"
#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"

namespace engine {
namespace process_group_detail {

// c10::Error's what() carries a C++ backtrace on 1.13: users need the one-line reason.
std::string reason(const std::exception& e);

// Throws std::invalid_argument when the rank or the master port is out of range; `maker` names
// the factory in the message (e.g. "make_gloo_collectives").
void check_world(const WorldInfo& world, const char* maker);

// Connects to (rank 0: serves) the TCPStore at MASTER_ADDR:MASTER_PORT; rank 0 returns only once
// every rank joined, or throws after `store_timeout`.
c10::intrusive_ptr<c10d::Store> connect_store(const WorldInfo& world, std::chrono::milliseconds store_timeout);

// Waits for `work`; throws std::runtime_error when wait() returns false instead of throwing (2.x
// reports some failures, e.g. an aborted NCCL communicator, through the bool).
void wait(const c10::intrusive_ptr<c10d::Work>& work);

// The RunError for a failed rendezvous (store or group creation).
[[noreturn]] void throw_rendezvous_error(const WorldInfo& world, std::chrono::milliseconds store_timeout,
                                         const std::exception& e);

}  // namespace process_group_detail

template <class Group>
class ProcessGroupCollectives : public Collectives {
 public:
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override;
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override;
  void broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  void barrier() override;

 protected:
  // Checks rank and port (std::invalid_argument naming `maker`); the group is not created yet.
  ProcessGroupCollectives(const WorldInfo& world, std::chrono::milliseconds timeout, std::size_t bucket_bytes,
                          const char* maker)
      : rank_(world.rank), size_(world.world_size), timeout_(timeout), bucket_bytes_(bucket_bytes) {
    process_group_detail::check_world(world, maker);
  }

  // Meets the other ranks at the TCPStore and creates the group: make_group(store) returns
  // c10::intrusive_ptr<Group>. Any failure becomes a RunError that says what to check.
  template <class MakeGroup>
  void rendezvous(const WorldInfo& world, MakeGroup&& make_group) {
    // The rendezvous gets the same bound as every collective; under 1 s TCPStore fails to connect.
    auto store_timeout = std::max(timeout_, std::chrono::milliseconds(1000));
    try {
      store_ = process_group_detail::connect_store(world, store_timeout);
      pg_ = make_group(store_);
    } catch (const std::exception& e) {
      process_group_detail::throw_rendezvous_error(world, store_timeout, e);
    }
  }

  // Hooks for what differs between backends; the defaults are Gloo's (CPU, no staging).
  // The buffer the transport moves for `t` (NCCL: a device copy of a CPU tensor).
  virtual torch::Tensor to_transport(const torch::Tensor& t) const { return t; }
  // all_gather's input: `t` padded along dim 0 to `padded_shape`, where the transport reads it.
  virtual torch::Tensor gather_input(const torch::Tensor& t, const std::vector<int64_t>& padded_shape) const {
    torch::Tensor input = t.contiguous();
    if (t.size(0) < padded_shape[0]) {
      input = torch::zeros(padded_shape, t.options());
      input.narrow(0, 0, t.size(0)).copy_(t);
    }
    return input;
  }
  // Inserted after "<op> failed on rank R of N" in transport errors (NCCL: " (NCCL, cuda:0)").
  virtual std::string where() const { return ""; }
  virtual void prepare_barrier(c10d::BarrierOptions&) const {}

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<Group> pg_;  // 1.13: a ProcessGroup; 2.x: a Backend

 private:
  // Runs one step that talks to peers; a transport error becomes a RunError that names the
  // operation and this rank, and poisons the group: after a peer died, later calls must fail at
  // once instead of each waiting out the timeout (e.g. a barrier in the trainer's cleanup).
  template <class F>
  void talk(const char* op, F&& step);
  template <class Start>
  void bucketed(const char* op, std::vector<torch::Tensor>& tensors, bool fill, bool unpack, Start&& start);
  // The GatherRows of collective_plan.h for the checks that precede operation `op`.
  GatherRows gather_rows(const char* op);

  std::size_t bucket_bytes_;
  std::string broken_;  // first transport error; non-empty = unusable
  c10::intrusive_ptr<c10d::Store> store_;
};

template <class Group>
template <class F>
void ProcessGroupCollectives<Group>::talk(const char* op, F&& step) {
  if (!broken_.empty()) {
    throw RunError(
        fmt::format("{} on rank {}: collectives unusable after an earlier failure: {}", op, rank_, broken_));
  }
  try {
    step();
  } catch (const std::exception& e) {
    std::string peer = size_ == 2 ? fmt::format(" (the peer is rank {})", 1 - rank_) : "";
    broken_ = fmt::format(
        "{} failed on rank {} of {}{}: {}. A peer process probably exited or "
        "stopped calling collectives{}",
        op, rank_, size_, where(), process_group_detail::reason(e), peer);
    throw RunError(broken_);
  }
}

template <class Group>
GatherRows ProcessGroupCollectives<Group>::gather_rows(const char* op) {
  return [this, op](const torch::Tensor& row) {
    std::vector<torch::Tensor> in{to_transport(row).contiguous()};
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty_like(in[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;  // honoured by 2.x; 1.13's Gloo uses the Options timeout set at creation
    talk(op, [&] { process_group_detail::wait(pg_->allgather(out, in, opts)); });
    // The plan reads it on the CPU (its rows are CPU tensors: a no-op for Gloo; NCCL: syncs).
    return torch::stack(out[0]).cpu();
  };
}

// Packs bucket k+1 while the transport already moves bucket k, and unpacks bucket k as soon as it
// lands: the copies hide behind the transfer instead of adding to it. A bucket the transport cannot
// move in place (NCCL: CPU members) is staged via to_transport() and its result copied back into
// the bucket's buffer (which aliases the members or is unflattened into them).
template <class Group>
template <class Start>
void ProcessGroupCollectives<Group>::bucketed(const char* op, std::vector<torch::Tensor>& tensors, bool fill,
                                              bool unpack, Start&& start) {
  std::vector<Bucket> buckets = make_buckets(tensors, bucket_bytes_);
  std::vector<c10::intrusive_ptr<c10d::Work>> works(buckets.size());
  std::vector<torch::Tensor> staged(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].numel == 0) continue;  // nothing to move (same on every rank: shapes agree)
    pack(buckets[i], tensors, fill);
    staged[i] = to_transport(buckets[i].flat);
    talk(op, [&] { works[i] = start(staged[i]); });
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!works[i]) continue;
    talk(op, [&] { process_group_detail::wait(works[i]); });
    if (!staged[i].is_same(buckets[i].flat)) buckets[i].flat.copy_(staged[i]);
    if (unpack) unflatten(buckets[i], tensors);
  }
}

template <class Group>
void ProcessGroupCollectives<Group>::all_reduce_sum(std::vector<torch::Tensor>& tensors) {
  if (size_ == 1) return;
  // One small collective proves every rank passes the same list; only then the real one, so a
  // mismatch is an error on every rank instead of a hang or a sum of unrelated bytes.
  check_same_shapes("all_reduce_sum", tensors, /*root=*/-1, gather_rows("all_reduce_sum"));
  torch::NoGradGuard no_grad;
  c10d::AllreduceOptions opts;  // SUM by default
  opts.timeout = timeout_;
  bucketed("all_reduce_sum", tensors, /*fill=*/true, /*unpack=*/true, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> buf{flat};
    return pg_->allreduce(buf, opts);
  });
}

template <class Group>
void ProcessGroupCollectives<Group>::broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (root < 0 || root >= size_) {
    throw std::invalid_argument(fmt::format("broadcast: root {} is not a rank of a world of {}", root, size_));
  }
  if (size_ == 1) return;
  check_same_shapes("broadcast", tensors, root, gather_rows("broadcast"));
  torch::NoGradGuard no_grad;  // parameters are leaves that require grad: copy_ needs this
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.rootTensor = 0;
  opts.timeout = timeout_;
  // Only root's values matter: the others receive into uninitialised buffers and unpack them.
  const bool is_root = rank_ == root;
  bucketed("broadcast", tensors, /*fill=*/is_root, /*unpack=*/!is_root, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> buf{flat};
    return pg_->broadcast(buf, opts);
  });
}

template <class Group>
std::vector<torch::Tensor> ProcessGroupCollectives<Group>::all_gather(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach();
  if (t.dim() == 0) t = t.reshape({1});  // a scalar gathers as one row per rank
  if (size_ == 1) return {t};
  std::vector<int64_t> rows = check_gather_shapes(t, gather_rows("all_gather"));
  int64_t max_rows = *std::max_element(rows.begin(), rows.end());
  std::vector<int64_t> padded_shape = t.sizes().vec();
  padded_shape[0] = max_rows;
  // allgather needs equal sizes everywhere: pad dim 0 to the longest, trim afterwards.
  torch::Tensor input = gather_input(t, padded_shape);
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty(padded_shape, input.options()));
  if (out[0][0].numel() > 0) {  // the padded shape is the same everywhere: all skip or none does
    std::vector<torch::Tensor> in{input};
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    talk("all_gather", [&] { process_group_detail::wait(pg_->allgather(out, in, opts)); });
  }
  std::vector<torch::Tensor> result;
  // .to() returns the same tensor when it already lives on t's device (Gloo).
  for (int r = 0; r < size_; ++r) result.push_back(out[0][r].narrow(0, 0, rows[r]).to(t.device()));
  return result;
}

template <class Group>
void ProcessGroupCollectives<Group>::barrier() {
  if (size_ == 1) return;
  c10d::BarrierOptions opts;
  prepare_barrier(opts);
  opts.timeout = timeout_;
  talk("barrier", [&] { process_group_detail::wait(pg_->barrier(opts)); });
}

}  // namespace engine
