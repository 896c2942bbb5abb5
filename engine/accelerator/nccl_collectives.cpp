// Collectives over c10d's ProcessGroupNCCL (CUDA): the GPU twin of gloo_collectives.cpp, with the
// same contract (collectives.h), the same agreement checks and the same buckets (collective_plan.h).
// Compiled in only when LibTorch was built with NCCL (USE_C10D_NCCL: a CUDA LibTorch such as pip
// torch 2.x); Debian's CPU-only 1.13 gets the stub at the end, which says how to get a CUDA build.
//
// Differences from Gloo that shape this file (reference/libtorch-compat.md, c10d):
// - NCCL only moves CUDA tensors on this rank's device. The Accelerator hands over CPU tensors
//   too (metric sums, gathered predictions), so such tensors are staged through the device here
//   and the caller never needs to know which backend runs.
// - Each rank must select its CUDA device (LOCAL_RANK) before the first collective, or every
//   rank of a node piles onto GPU 0 and NCCL fails or hangs.
// - NCCL work is asynchronous on a side stream; wait() only orders the current stream after it.
//   Results read on the CPU (the agreement checks) are copied back with .cpu(), which syncs.
// - A dead peer does not reset a socket as with Gloo: without blocking wait, the GPU spins until
//   the watchdog aborts the process after the timeout. We ask for blocking wait (unless the user
//   chose otherwise) so that wait() throws after `timeout` and the error names the operation;
//   `engine launch` brings the job down at once anyway when a worker dies.
#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"

#if defined(USE_C10D_NCCL)

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/accelerator/collective_plan.h"

namespace engine {
namespace {

// c10::Error's what() carries a C++ backtrace on 1.13: users need the one-line reason.
std::string reason(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

class NcclCollectives final : public Collectives {
 public:
  NcclCollectives(const WorldInfo& world, std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override;
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override;
  void broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  void barrier() override;

 private:
  // Same as Gloo's: a transport error becomes a RunError naming the operation and this rank, and
  // poisons the group so that later calls fail at once instead of each waiting out the timeout.
  template <class F>
  void talk(const char* op, F&& step);
  template <class Start>
  void bucketed(const char* op, std::vector<torch::Tensor>& tensors, bool fill, bool unpack, Start&& start);
  GatherRows gather_rows(const char* op);
  // NCCL moves device memory only: a CPU buffer travels through a device copy.
  torch::Tensor on_device(const torch::Tensor& t) const { return t.device() == device_ ? t : t.to(device_); }

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  torch::Device device_;
  // 25 MB, DDP's bucket_cap_mb: NVLink/PCIe latency is far below Gloo's, so bigger buckets win.
  std::size_t bucket_bytes_ = 25u << 20;
  std::string broken_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;  // 1.13: a ProcessGroup; 2.x: a Backend
};

NcclCollectives::NcclCollectives(const WorldInfo& world, std::chrono::milliseconds timeout)
    : rank_(world.rank),
      size_(world.world_size),
      timeout_(timeout),
      device_(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank)) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw std::invalid_argument(fmt::format("make_nccl_collectives: rank {} outside world of {}", rank_, size_));
  }
  if (world.master_port < 1 || world.master_port > 65535) {
    throw std::invalid_argument(
        fmt::format("make_nccl_collectives: master_port {} is not a TCP port", world.master_port));
  }
  const int devices = static_cast<int>(c10::cuda::device_count());
  if (world.local_rank >= devices) {
    throw UserError(fmt::format(
        "local rank {} needs CUDA device {}, but this node has {} visible device(s): start at most {} "
        "processes per node (engine launch -n {}) or check CUDA_VISIBLE_DEVICES",
        world.local_rank, world.local_rank, devices, devices, devices));
  }
  // First of all: bind this process to its GPU, before NCCL creates any communicator or stream.
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(world.local_rank));
  // wait() throws after the timeout instead of the watchdog killing the process (see the top).
  // Read by the ProcessGroupNCCL constructor; 2.2+ spells it TORCH_NCCL_BLOCKING_WAIT and warns
  // about the old name. overwrite = 0: a user's explicit choice wins.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
#else
  setenv("NCCL_BLOCKING_WAIT", "1", 0);
#endif

  auto store_timeout = std::max(timeout, std::chrono::milliseconds(1000));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(world.master_port);
  so.isServer = rank_ == 0;
  so.numWorkers = static_cast<std::size_t>(size_);
  so.waitWorkers = true;
  so.timeout = store_timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;  // 10 minutes by default: far too long for fail-fast
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store_, rank_, size_, options);
  } catch (const std::exception& e) {
    throw RunError(
        fmt::format("rendezvous at {}:{} failed on rank {} of {} (timeout {} ms): {}. Check that every rank "
                    "started, that MASTER_ADDR/MASTER_PORT agree, and that the port is free on rank 0's host",
                    world.master_addr, world.master_port, rank_, size_, store_timeout.count(), reason(e)));
  }
}

template <class F>
void NcclCollectives::talk(const char* op, F&& step) {
  if (!broken_.empty()) {
    throw RunError(
        fmt::format("{} on rank {}: collectives unusable after an earlier failure: {}", op, rank_, broken_));
  }
  try {
    step();
  } catch (const std::exception& e) {
    std::string peer = size_ == 2 ? fmt::format(" (the peer is rank {})", 1 - rank_) : "";
    broken_ = fmt::format(
        "{} failed on rank {} of {} (NCCL, cuda:{}): {}. A peer process probably exited or "
        "stopped calling collectives{}",
        op, rank_, size_, static_cast<int>(device_.index()), reason(e), peer);
    throw RunError(broken_);
  }
}

GatherRows NcclCollectives::gather_rows(const char* op) {
  return [this, op](const torch::Tensor& row) {
    std::vector<torch::Tensor> in{on_device(row).contiguous()};
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty_like(in[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    talk(op, [&] { pg_->allgather(out, in, opts)->wait(); });
    return torch::stack(out[0]).cpu();  // the plan reads it on the CPU; .cpu() syncs the stream
  };
}

// Buckets as in Gloo; a bucket whose members live on the CPU is staged on the device and its
// result copied back into the CPU buffer (which aliases the members or is unflattened into them).
template <class Start>
void NcclCollectives::bucketed(const char* op, std::vector<torch::Tensor>& tensors, bool fill, bool unpack,
                               Start&& start) {
  std::vector<Bucket> buckets = make_buckets(tensors, bucket_bytes_);
  std::vector<c10::intrusive_ptr<c10d::Work>> works(buckets.size());
  std::vector<torch::Tensor> staged(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].numel == 0) continue;
    pack(buckets[i], tensors, fill);
    staged[i] = on_device(buckets[i].flat);
    talk(op, [&] { works[i] = start(staged[i]); });
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!works[i]) continue;
    talk(op, [&] { works[i]->wait(); });
    if (!staged[i].is_same(buckets[i].flat)) buckets[i].flat.copy_(staged[i]);
    if (unpack) unflatten(buckets[i], tensors);
  }
}

void NcclCollectives::all_reduce_sum(std::vector<torch::Tensor>& tensors) {
  if (size_ == 1) return;
  check_same_shapes("all_reduce_sum", tensors, /*root=*/-1, gather_rows("all_reduce_sum"));
  torch::NoGradGuard no_grad;
  c10d::AllreduceOptions opts;  // SUM by default
  opts.timeout = timeout_;
  bucketed("all_reduce_sum", tensors, /*fill=*/true, /*unpack=*/true, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> buf{flat};
    return pg_->allreduce(buf, opts);
  });
}

void NcclCollectives::broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (root < 0 || root >= size_) {
    throw std::invalid_argument(fmt::format("broadcast: root {} is not a rank of a world of {}", root, size_));
  }
  if (size_ == 1) return;
  check_same_shapes("broadcast", tensors, root, gather_rows("broadcast"));
  torch::NoGradGuard no_grad;
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  opts.rootTensor = 0;
  opts.timeout = timeout_;
  const bool is_root = rank_ == root;
  bucketed("broadcast", tensors, /*fill=*/is_root, /*unpack=*/!is_root, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> buf{flat};
    return pg_->broadcast(buf, opts);
  });
}

std::vector<torch::Tensor> NcclCollectives::all_gather(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach();
  if (t.dim() == 0) t = t.reshape({1});
  if (size_ == 1) return {t};
  std::vector<int64_t> rows = check_gather_shapes(t, gather_rows("all_gather"));
  int64_t max_rows = *std::max_element(rows.begin(), rows.end());
  std::vector<int64_t> padded_shape = t.sizes().vec();
  padded_shape[0] = max_rows;
  // NCCL's allgather needs equal sizes everywhere, like Gloo's: pad dim 0, trim afterwards.
  auto dev = t.options().device(device_);
  torch::Tensor input = torch::zeros(padded_shape, dev);
  input.narrow(0, 0, t.size(0)).copy_(t);
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty(padded_shape, dev));
  if (out[0][0].numel() > 0) {
    std::vector<torch::Tensor> in{input};
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    talk("all_gather", [&] { pg_->allgather(out, in, opts)->wait(); });
  }
  std::vector<torch::Tensor> result;
  for (int r = 0; r < size_; ++r) result.push_back(out[0][r].narrow(0, 0, rows[r]).to(t.device()));
  return result;
}

void NcclCollectives::barrier() {
  if (size_ == 1) return;
  c10d::BarrierOptions opts;
  opts.device_ids = {static_cast<int64_t>(device_.index())};  // else c10d guesses a GPU and warns
  opts.timeout = timeout_;
  talk("barrier", [&] { pg_->barrier(opts)->wait(); });
}

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const WorldInfo& world, std::chrono::milliseconds timeout) {
  return std::make_unique<NcclCollectives>(world, timeout);
}

}  // namespace engine

#else  // !USE_C10D_NCCL: a CPU-only LibTorch (e.g. Debian's 1.13)

namespace engine {

std::unique_ptr<Collectives> make_nccl_collectives(const WorldInfo& world, std::chrono::milliseconds) {
  throw UserError("rank " + std::to_string(world.rank) +
                  ": this build has no NCCL (its LibTorch is CPU-only), so it cannot run on several CUDA "
                  "devices: build against a CUDA LibTorch (e.g. cmake -DCMAKE_PREFIX_PATH=\"$(python3 -c "
                  "'import torch; print(torch.utils.cmake_prefix_path)')\"; tools/gpu_check.sh does it), or "
                  "set accelerator.device = \"cpu\" to use Gloo");
}

}  // namespace engine

#endif
