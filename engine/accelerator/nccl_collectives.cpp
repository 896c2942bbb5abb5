// Collectives over c10d's ProcessGroupNCCL (CUDA): the GPU twin of gloo_collectives.cpp, with the
// same contract (collectives.h), the same agreement checks and the same buckets (collective_plan.h);
// the shared logic is process_group_collectives.h, this file holds only what NCCL does differently.
// Compiled in only when LibTorch was built with NCCL (USE_C10D_NCCL: a CUDA LibTorch such as pip
// torch 2.x) and <nccl.h> is on the include path (pip: the nvidia-nccl wheel, which
// cmake/EngineTorchDeps.cmake finds); Debian's CPU-only 1.13, or a missing nccl.h, gets the stub at
// the end, which says how to get a working build.
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

#if defined(USE_C10D_NCCL) && __has_include(<nccl.h>)

#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "engine/accelerator/process_group_collectives.h"

namespace engine {
namespace {

class NcclCollectives final : public ProcessGroupCollectives<c10d::ProcessGroupNCCL> {
 public:
  // 25 MB buckets, DDP's bucket_cap_mb: NVLink/PCIe latency is far below Gloo's, so bigger win.
  NcclCollectives(const WorldInfo& world, std::chrono::milliseconds timeout)
      : ProcessGroupCollectives(world, timeout, /*bucket_bytes=*/25u << 20, "make_nccl_collectives"),
        device_(torch::kCUDA, static_cast<c10::DeviceIndex>(world.local_rank)) {
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
    rendezvous(world, [&](const c10::intrusive_ptr<c10d::Store>& store) {
      auto options = c10d::ProcessGroupNCCL::Options::create();
      options->timeout = timeout;  // 10 minutes by default: far too long for fail-fast
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank_, size_, options);
    });
  }

 protected:
  // NCCL moves device memory only: a CPU buffer travels through a device copy.
  torch::Tensor to_transport(const torch::Tensor& t) const override {
    return t.device() == device_ ? t : t.to(device_);
  }
  // Always a padded copy on the device (the result is copied back to the caller's device).
  torch::Tensor gather_input(const torch::Tensor& t, const std::vector<int64_t>& padded_shape) const override {
    torch::Tensor input = torch::zeros(padded_shape, t.options().device(device_));
    input.narrow(0, 0, t.size(0)).copy_(t);
    return input;
  }
  std::string where() const override { return fmt::format(" (NCCL, cuda:{})", static_cast<int>(device_.index())); }
  void prepare_barrier(c10d::BarrierOptions& opts) const override {
    opts.device_ids = {static_cast<int64_t>(device_.index())};  // else c10d guesses a GPU and warns
  }

 private:
  torch::Device device_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const WorldInfo& world, std::chrono::milliseconds timeout) {
  return std::make_unique<NcclCollectives>(world, timeout);
}

}  // namespace engine

#else  // no NCCL: a CPU-only LibTorch (e.g. Debian's 1.13), or no nccl.h at build time

namespace engine {

std::unique_ptr<Collectives> make_nccl_collectives(const WorldInfo& world, std::chrono::milliseconds) {
#if defined(USE_C10D_NCCL)
  throw UserError("rank " + std::to_string(world.rank) +
                  ": this build has no NCCL, so it cannot run on several CUDA devices: its LibTorch has NCCL, "
                  "but nccl.h was not on the include path when it was built. pip install nvidia-nccl-cu13 "
                  "(or -cu12, matching torch's CUDA) or pass -DENGINE_NCCL_INCLUDE_DIR=<folder holding nccl.h> "
                  "to cmake, and rebuild; or set accelerator.device = \"cpu\" to use Gloo");
#else
  throw UserError("rank " + std::to_string(world.rank) +
                  ": this build has no NCCL (its LibTorch is CPU-only), so it cannot run on several CUDA "
                  "devices: build against a CUDA LibTorch (e.g. cmake -DENGINE_TORCH_FROM_PYTHON=ON, which uses "
                  "python3's pip torch; tools/gpu_check.sh does it), or set accelerator.device = \"cpu\" to use "
                  "Gloo");
#endif
}

}  // namespace engine

#endif
