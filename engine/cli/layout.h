#pragma once
// The process x thread layout `engine run` picks for itself ([accelerator] processes, 0 = auto),
// so that the shipped command uses the whole machine without a launcher command line.
//
// The layout never changes results: N processes split data.batch_size (each takes batch_size / N),
// and N ranks x b/N samples average to the same gradients as 1 rank x b (the sampler and the
// all-reduce make that exact up to float summation order, and drop_path / dropout draw their masks
// per sample of the global batch, engine/core/sample_draws.h; tests/engine/accelerator). It changes
// only how fast the same run goes. BatchNorm normalises with batch statistics in training: its
// layers all-reduce them across the processes (SyncBatchNorm, components/models/batch_norm.h) unless
// [accelerator] sync_batchnorm = false, where each process normalises over its own batch_size / N
// samples (PyTorch DDP's default) and the layout does change the model.
#include <cstdint>
#include <string>

namespace engine {

struct Layout {
  int processes = 1;
  int threads = 1;               // intra-op threads per process
  int64_t batch_per_process = 0;
  std::string why;               // one line for the log
  std::string note;              // a second line for the log, or empty
};

/// `requested` processes (0 = auto) for a recipe batch of `batch_size`, on `cores` usable CPU
/// cores and `gpus` CUDA devices, with `threads` per process requested (0 = cores / processes).
/// Auto: one process per GPU, or on CPU one process per core with one thread each (measured:
/// data-parallel processes scale better than intra-op threads on small convolution batches,
/// bench/RESULTS.md), reduced until the processes divide batch_size with >= 8 samples each.
/// `batch_norm`: whether the model has BatchNorm layers, and whether they synchronise across ranks.
/// Auto on CPU keeps such a model in one process with every core (measured on 2 cores, resnet34:
/// 2 x 1 with synchronised statistics trained 9% slower than 1 x 2, and without them changes the
/// model for ~2%), and `why` says so; `note` says what a split batch does to BatchNorm whenever
/// one happens (an explicit count, or one process per GPU).
/// UserError when an explicit count does not divide batch_size.
enum class BatchNormLayers { none, synchronised, per_process };
Layout choose_layout(int64_t requested, int64_t batch_size, int64_t threads, int cores, int gpus,
                     BatchNormLayers batch_norm = BatchNormLayers::none);

}  // namespace engine
