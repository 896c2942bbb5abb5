// The non-template half of process_group_collectives.h.
#include "engine/accelerator/process_group_collectives.h"

#include <c10/util/Exception.h>

#include <cstdint>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace engine::process_group_detail {

std::string reason(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
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
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(world.master_port);
  so.isServer = world.rank == 0;
  so.numWorkers = static_cast<std::size_t>(world.world_size);
  so.waitWorkers = true;  // rank 0 returns only once all ranks joined (or throws after timeout)
  so.timeout = store_timeout;
  return c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
}

void throw_rendezvous_error(const WorldInfo& world, std::chrono::milliseconds store_timeout,
                            const std::exception& e) {
  throw RunError(
      fmt::format("rendezvous at {}:{} failed on rank {} of {} (timeout {} ms): {}. Check that every rank "
                  "started, that MASTER_ADDR/MASTER_PORT agree, and that the port is free on rank 0's host",
                  world.master_addr, world.master_port, world.rank, world.world_size, store_timeout.count(),
                  reason(e)));
}

}  // namespace engine::process_group_detail
