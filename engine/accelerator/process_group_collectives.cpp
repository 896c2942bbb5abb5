// The non-template half of process_group_collectives.h. Built only where LibTorch ships the c10d
// headers (both 1.13 and 2.x do): a LibTorch without distributed support still builds the engine,
// whose Gloo/NCCL factories are then stubs (gloo_collectives.cpp, nccl_collectives.cpp).
#if __has_include(<torch/csrc/distributed/c10d/TCPStore.hpp>)
#include "engine/accelerator/process_group_collectives.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

namespace engine::process_group_detail {

std::string reason(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

void wait(const c10::intrusive_ptr<c10d::Work>& work) {
  if (!work->wait()) throw std::runtime_error("the transport reported a failure (Work::wait() returned false)");
}

void check_world(const WorldInfo& world, const char* maker) {
  if (world.world_size < 1 || world.rank < 0 || world.rank >= world.world_size) {
    throw std::invalid_argument(
        fmt::format("{}: rank {} outside world of {}", maker, world.rank, world.world_size));
  }
  if (world.master_port < 1 || world.master_port > 65535) {
    throw std::invalid_argument(fmt::format("{}: master_port {} is not a TCP port", maker, world.master_port));
  }
}

c10::intrusive_ptr<c10d::Store> connect_store(const WorldInfo& world, std::chrono::milliseconds store_timeout) {
  if (!world.rendezvous_file.empty()) {  // a single-node engine launch job: no listening socket
    auto store = c10::make_intrusive<c10d::FileStore>(world.rendezvous_file, world.world_size);
    store->setTimeout(store_timeout);
    return store;
  }
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(world.master_port);
  so.isServer = world.rank == 0;
  so.numWorkers = static_cast<std::size_t>(world.world_size);
  so.waitWorkers = true;  // rank 0 returns only once all ranks joined (or throws after timeout)
  so.timeout = store_timeout;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  // 2.4+ asks for the libuv server by default; a LibTorch built without libuv (Debian's 2.6) then
  // throws "use_libuv was requested but PyTorch was build without libuv support" on every rank:
  // such a build still has the classic server, so ask again for that one.
  try {
    return c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
  } catch (const std::exception& e) {
    if (!so.useLibUV || reason(e).find("without libuv") == std::string::npos) throw;
    so.useLibUV = false;
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
}

void throw_rendezvous_error(const WorldInfo& world, std::chrono::milliseconds store_timeout,
                            const std::exception& e) {
  if (!world.rendezvous_file.empty())
    throw RunError(fmt::format("rendezvous through {} failed on rank {} of {} (timeout {} ms): {}. Check that every "
                               "rank of this engine launch job started",
                               world.rendezvous_file, world.rank, world.world_size, store_timeout.count(), reason(e)));
  throw RunError(
      fmt::format("rendezvous at {}:{} failed on rank {} of {} (timeout {} ms): {}. Check that every rank "
                  "started, that MASTER_ADDR/MASTER_PORT agree, and that the port is free on rank 0's host",
                  world.master_addr, world.master_port, world.rank, world.world_size, store_timeout.count(),
                  reason(e)));
}

}  // namespace engine::process_group_detail

#endif
