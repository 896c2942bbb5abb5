#include "engine/cli/layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "engine/core/errors.h"

namespace engine {

Layout choose_layout(int64_t requested, int64_t batch_size, int64_t threads, int cores, int gpus,
                     BatchNormLayers batch_norm) {
  Layout l;
  cores = std::max(1, cores);
  if (requested > 0) {
    if (batch_size % requested != 0)
      throw UserError(fmt::format("accelerator.processes = {} does not divide data.batch_size = {}: each process takes an "
                                  "equal share of the batch; choose a divisor, or processes = 0 (auto)",
                                  requested, batch_size));
    l.processes = static_cast<int>(requested);
    l.why = "accelerator.processes";
  } else if (batch_norm != BatchNormLayers::none && gpus == 0) {
    l.processes = 1;
    l.why = fmt::format("auto: {} usable cores; the model has BatchNorm, whose statistics several processes would "
                        "have to synchronise at every layer: one process, every core",
                        cores);
  } else {
    constexpr int64_t kMinPerProcess = 8;  // below this a rank's batch is all overhead
    int p = gpus > 0 ? gpus : static_cast<int>(std::max<int64_t>(1, cores / std::max<int64_t>(1, threads)));
    while (p > 1 && (batch_size % p != 0 || batch_size / p < kMinPerProcess)) --p;
    l.processes = p;
    l.why = gpus > 0 ? fmt::format("auto: one process per GPU ({})", gpus)
                     : fmt::format("auto: {} usable cores, one process per {}", cores,
                                   threads > 0 ? fmt::format("{} threads", threads) : std::string("core"));
  }
  l.threads = static_cast<int>(threads > 0 ? threads : std::max(1, cores / l.processes));
  l.batch_per_process = batch_size / l.processes;
  if (l.processes > 1 && batch_norm == BatchNormLayers::synchronised)
    l.note = fmt::format("BatchNorm layers all-reduce their statistics over the {} processes (accelerator.sync_batchnorm): "
                         "they normalise over all {} samples, as one process would",
                         l.processes, batch_size);
  if (l.processes > 1 && batch_norm == BatchNormLayers::per_process)
    l.note = fmt::format("BatchNorm normalises over each process's {} samples, not the {} of one process "
                         "(accelerator.sync_batchnorm = false): results differ from a 1-process run's",
                         l.batch_per_process, batch_size);
  return l;
}

}  // namespace engine
