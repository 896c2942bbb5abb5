#pragma once
// Batches samples into tensors on worker threads, with bounded prefetch, in a fixed order.
//
// Determinism: sample i of epoch e is transformed with Rng(mix(seed, e, i)), so the batches are
// identical whatever the number of workers or the thread timing. Batch k is always the k-th
// chunk of the index list given to start().
#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "components/datasets/dataset.h"
#include "components/transforms/transform.h"

namespace engine {

struct Batch {
  torch::Tensor images;   // [B, C, H, W] float32 (values as the transforms left them)
  torch::Tensor labels;   // [B] int64 (-1 when unlabeled)
  torch::Tensor indices;  // [B] int64 dataset indices, for per-sample reports and predictions
};

struct LoaderOptions {
  int64_t batch_size = 64;
  int64_t workers = 2;        // 0 = load in the calling thread
  int64_t prefetch = 4;       // batches ready ahead of the consumer
  bool channels_last = false; // lay batches out NHWC in memory (matches a channels-last model)
  uint64_t seed = 0;
  // Keep transformed samples, up to this many bytes, for the next passes (the evaluation loader:
  // the same samples every epoch). Only when no transform is random (Transform::random()): a kept
  // sample is then the bits a new one would be. 0 = keep nothing.
  int64_t cache_bytes = 0;
};

class Loader {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, std::vector<std::shared_ptr<const Transform>> transforms,
         LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Begins a pass over `indices` (already this rank's, in order), cut into batches.
  void start(std::vector<size_t> indices, int64_t epoch);
  /// The next batch in order; false at the end of the pass. Rethrows a worker's error.
  bool next(Batch& out);
  int64_t num_batches() const { return num_batches_; }

  /// Transforms and collates one batch (used by the workers; public for tests).
  Batch make_batch(const std::vector<size_t>& indices, int64_t epoch) const;
  /// Samples kept for later passes (cache_bytes), and their bytes.
  size_t cached_samples() const;
  int64_t cached_bytes() const;

 private:
  void stop_workers();
  void worker_loop(int64_t worker);
  // Sample `index` transformed, as CV_32F continuous: kept, or made (and kept while under budget).
  cv::Mat transformed(size_t index, int64_t epoch, int64_t& label) const;

  std::shared_ptr<const Dataset> dataset_;
  std::vector<std::shared_ptr<const Transform>> transforms_;
  LoaderOptions opts_;

  std::vector<size_t> indices_;
  int64_t epoch_ = 0;
  int64_t num_batches_ = 0;
  int64_t consumed_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Batch> ready_;
  std::exception_ptr error_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;

  struct Kept {
    cv::Mat image;
    int64_t label;
  };
  bool cacheable_ = false;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<size_t, Kept> cache_;
  mutable int64_t cache_used_ = 0;
};

}  // namespace engine
