// Collectives over c10d's ProcessGroupGloo (CPU). See collectives.h for the contract and
// reference/libtorch-compat.md (c10d) for the 1.13 / 2.x differences this file steers around.
// The shared c10d logic (checks, buckets, error handling) is process_group_collectives.h.
// Compiled in only when LibTorch has Gloo (USE_C10D_GLOO, defined by linking ${TORCH_LIBRARIES})
// and the Gloo headers are on the include path (Debian: libgloo-dev; a pip wheel may lack them,
// see cmake/EngineTorchDeps.cmake); otherwise the stub at the end says what is missing, so a
// missing header costs the multi-process CPU path only, not the build.
#include "engine/accelerator/collectives.h"
#include "engine/core/errors.h"

#if defined(USE_C10D_GLOO) && __has_include(<gloo/transport/device.h>)

#include <torch/torch.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "engine/accelerator/process_group_collectives.h"

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

class GlooCollectives final : public ProcessGroupCollectives<c10d::ProcessGroupGloo> {
 public:
  // 4 MB buckets: small enough that packing bucket k+1 overlaps moving bucket k (3.4M floats = 4
  // buckets), large enough that per-call latency (~0.1 ms) stays negligible. Measured 1-64 MB.
  GlooCollectives(const WorldInfo& world, std::chrono::milliseconds timeout)
      : ProcessGroupCollectives(world, timeout, /*bucket_bytes=*/4u << 20, "make_gloo_collectives") {
    rendezvous(world, [&](const c10::intrusive_ptr<c10d::Store>& store) {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(make_device(world.master_addr));
      return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank_, size_, options);
    });
  }
};

}  // namespace

std::unique_ptr<Collectives> make_gloo_collectives(const WorldInfo& world,
                                                   std::chrono::milliseconds timeout) {
  return std::make_unique<GlooCollectives>(world, timeout);
}

}  // namespace engine

#else  // no Gloo: a LibTorch without USE_C10D_GLOO, or no Gloo headers at build time

namespace engine {

std::unique_ptr<Collectives> make_gloo_collectives(const WorldInfo& world, std::chrono::milliseconds) {
#if defined(USE_C10D_GLOO)
  const char* why = "its LibTorch has Gloo, but the Gloo headers (gloo/transport/device.h) were not on the "
                    "include path when it was built: install libgloo-dev (Debian LibTorch) or pass "
                    "-DENGINE_GLOO_INCLUDE_DIR=<folder holding gloo/, matching this LibTorch> to cmake, and rebuild";
#else
  const char* why = "its LibTorch was built without Gloo (USE_C10D_GLOO): use a LibTorch with distributed "
                    "support (Debian's libtorch-dev, or pip torch)";
#endif
  throw UserError("rank " + std::to_string(world.rank) + ": this build has no Gloo, so it cannot run several "
                  "CPU processes: " + why + "; or run a single process (without engine launch)");
}

}  // namespace engine

#endif
