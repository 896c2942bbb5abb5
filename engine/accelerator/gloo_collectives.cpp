// Collectives over c10d's ProcessGroupGloo (CPU). See collectives.h for the contract and
// reference/libtorch-compat.md (c10d) for the 1.13 / 2.x differences this file steers around.
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "engine/accelerator/collective_plan.h"
#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"

#if !defined(USE_C10D_GLOO)
#error "ProcessGroupGloo.hpp is empty without USE_C10D_GLOO: link the target to ${TORCH_LIBRARIES}"
#endif

namespace engine {
namespace {

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr == "::1" || addr.rfind("127.", 0) == 0;
}

// Gloo needs a local address its peers can reach. A loopback rendezvous means every rank is on
// this host, so bind loopback (works without a resolvable hostname, e.g. in containers); otherwise
// bind the address this host's name resolves to, or the interface the user names like PyTorch.
std::shared_ptr<::gloo::transport::Device> make_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    std::string first(ifname);
    first = first.substr(0, first.find(','));
    return c10d::ProcessGroupGloo::createDeviceForInterface(first);
  }
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

// c10::Error's what() carries a C++ backtrace on 1.13: users need the one-line reason.
std::string reason(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

class GlooCollectives final : public Collectives {
 public:
  GlooCollectives(const WorldInfo& world, std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(std::vector<torch::Tensor>& tensors) override;
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override;
  void broadcast(std::vector<torch::Tensor>& tensors, int root) override;
  void barrier() override;

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

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  // 4 MB: small enough that packing bucket k+1 overlaps moving bucket k (3.4M floats = 4
  // buckets), large enough that per-call latency (~0.1 ms) stays negligible. Measured 1-64 MB.
  std::size_t bucket_bytes_ = 4u << 20;
  std::string broken_;  // first transport error; non-empty = unusable
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;  // 1.13: a ProcessGroup; 2.x: a Backend
};

GlooCollectives::GlooCollectives(const WorldInfo& world, std::chrono::milliseconds timeout)
    : rank_(world.rank), size_(world.world_size), timeout_(timeout) {
  if (size_ < 1 || rank_ < 0 || rank_ >= size_) {
    throw std::invalid_argument(
        fmt::format("make_gloo_collectives: rank {} outside world of {}", rank_, size_));
  }
  if (world.master_port < 1 || world.master_port > 65535) {
    throw std::invalid_argument(
        fmt::format("make_gloo_collectives: master_port {} is not a TCP port", world.master_port));
  }
  // The rendezvous gets the same bound as every collective; under 1 s TCPStore fails to connect.
  auto store_timeout = std::max(timeout, std::chrono::milliseconds(1000));
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(world.master_port);
  so.isServer = rank_ == 0;
  so.numWorkers = static_cast<std::size_t>(size_);
  so.waitWorkers = true;  // rank 0 returns only once all ranks joined (or throws after timeout)
  so.timeout = store_timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(make_device(world.master_addr));
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store_, rank_, size_, options);
  } catch (const std::exception& e) {
    throw RunError(
        fmt::format("rendezvous at {}:{} failed on rank {} of {} (timeout {} ms): {}. Check that every rank "
                    "started, that MASTER_ADDR/MASTER_PORT agree, and that the port is free on rank 0's host",
                    world.master_addr, world.master_port, rank_, size_, store_timeout.count(), reason(e)));
  }
}

template <class F>
void GlooCollectives::talk(const char* op, F&& step) {
  if (!broken_.empty()) {
    throw RunError(
        fmt::format("{} on rank {}: collectives unusable after an earlier failure: {}", op, rank_, broken_));
  }
  try {
    step();
  } catch (const std::exception& e) {
    std::string peer = size_ == 2 ? fmt::format(" (the peer is rank {})", 1 - rank_) : "";
    broken_ = fmt::format(
        "{} failed on rank {} of {}: {}. A peer process probably exited or "
        "stopped calling collectives{}",
        op, rank_, size_, reason(e), peer);
    throw RunError(broken_);
  }
}

GatherRows GlooCollectives::gather_rows(const char* op) {
  return [this, op](const torch::Tensor& row) {
    std::vector<torch::Tensor> in{row.contiguous()};
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty_like(in[0]));
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;  // honoured by 2.x; 1.13 uses the Options timeout set at creation
    talk(op, [&] { pg_->allgather(out, in, opts)->wait(); });
    return torch::stack(out[0]);
  };
}

// Packs bucket k+1 while Gloo's worker threads already move bucket k, and unpacks bucket k as
// soon as it lands: the copies hide behind the transfer instead of adding to it.
template <class Start>
void GlooCollectives::bucketed(const char* op, std::vector<torch::Tensor>& tensors, bool fill, bool unpack,
                               Start&& start) {
  std::vector<Bucket> buckets = make_buckets(tensors, bucket_bytes_);
  std::vector<c10::intrusive_ptr<c10d::Work>> works(buckets.size());
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i].numel == 0) continue;  // nothing to move (same on every rank: shapes agree)
    pack(buckets[i], tensors, fill);
    talk(op, [&] { works[i] = start(buckets[i].flat); });
  }
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (!works[i]) continue;
    talk(op, [&] { works[i]->wait(); });
    if (unpack) unflatten(buckets[i], tensors);
  }
}

void GlooCollectives::all_reduce_sum(std::vector<torch::Tensor>& tensors) {
  if (size_ == 1) return;
  // One small collective proves every rank passes the same list; only then the real one, so a
  // mismatch is an error on every rank instead of a hang or a sum of unrelated bytes.
  check_same_shapes("all_reduce_sum", tensors, /*root=*/-1, gather_rows("all_reduce_sum"));
  torch::NoGradGuard no_grad;
  c10d::AllreduceOptions opts;
  opts.timeout = timeout_;  // honoured by 2.x; 1.13 uses the Options timeout set at creation
  bucketed("all_reduce_sum", tensors, /*fill=*/true, /*unpack=*/true, [&](torch::Tensor& flat) {
    std::vector<torch::Tensor> buf{flat};
    return pg_->allreduce(buf, opts);
  });
}

void GlooCollectives::broadcast(std::vector<torch::Tensor>& tensors, int root) {
  if (root < 0 || root >= size_) {
    throw std::invalid_argument(
        fmt::format("broadcast: root {} is not a rank of a world of {}", root, size_));
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

std::vector<torch::Tensor> GlooCollectives::all_gather(const torch::Tensor& tensor) {
  torch::Tensor t = tensor.detach();
  if (t.dim() == 0) t = t.reshape({1});  // a scalar gathers as one row per rank
  if (size_ == 1) return {t};
  std::vector<int64_t> rows = check_gather_shapes(t, gather_rows("all_gather"));
  int64_t max_rows = *std::max_element(rows.begin(), rows.end());
  std::vector<int64_t> padded_shape = t.sizes().vec();
  padded_shape[0] = max_rows;
  // Gloo's allgather needs equal sizes everywhere: pad dim 0 to the longest, trim afterwards.
  torch::Tensor input = t.contiguous();
  if (t.size(0) < max_rows) {
    input = torch::zeros(padded_shape, t.options());
    input.narrow(0, 0, t.size(0)).copy_(t);
  }
  std::vector<std::vector<torch::Tensor>> out(1);
  for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty(padded_shape, t.options()));
  if (out[0][0].numel() > 0) {  // the padded shape is the same everywhere: all skip or none does
    std::vector<torch::Tensor> in{input};
    c10d::AllgatherOptions opts;
    opts.timeout = timeout_;
    talk("all_gather", [&] { pg_->allgather(out, in, opts)->wait(); });
  }
  std::vector<torch::Tensor> result;
  for (int r = 0; r < size_; ++r) result.push_back(out[0][r].narrow(0, 0, rows[r]));
  return result;
}

void GlooCollectives::barrier() {
  if (size_ == 1) return;
  c10d::BarrierOptions opts;
  opts.timeout = timeout_;
  talk("barrier", [&] { pg_->barrier(opts)->wait(); });
}

}  // namespace

std::unique_ptr<Collectives> make_gloo_collectives(const WorldInfo& world,
                                                   std::chrono::milliseconds timeout) {
  return std::make_unique<GlooCollectives>(world, timeout);
}

}  // namespace engine
