#include "engine/data/loader.h"

#include <opencv2/core.hpp>

#include <cstring>

#include "engine/core/env.h"
#include "engine/core/errors.h"
#include "engine/core/rng.h"

namespace engine {

Loader::Loader(std::shared_ptr<const Dataset> dataset, std::vector<std::shared_ptr<const Transform>> transforms,
               LoaderOptions options)
    : dataset_(std::move(dataset)), transforms_(std::move(transforms)), opts_(options) {
  cacheable_ = opts_.cache_bytes > 0 && !switched_off("ENGINE_EVAL_CACHE");
  for (const auto& t : transforms_) cacheable_ = cacheable_ && !t->random();
}

Loader::~Loader() { stop_workers(); }

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void Loader::start(std::vector<size_t> indices, int64_t epoch) {
  stop_workers();
  indices_ = std::move(indices);
  epoch_ = epoch;
  num_batches_ = (static_cast<int64_t>(indices_.size()) + opts_.batch_size - 1) / opts_.batch_size;
  consumed_ = 0;
  ready_.clear();
  error_ = nullptr;
  stopping_ = false;
  for (int64_t w = 0; w < opts_.workers; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

void Loader::worker_loop(int64_t worker) {
  // Worker w makes batches w, w+W, ...; it waits while it would run more than `prefetch` ahead.
  for (int64_t b = worker; b < num_batches_; b += opts_.workers) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || b < consumed_ + std::max<int64_t>(opts_.prefetch, opts_.workers); });
      if (stopping_) return;
    }
    Batch batch;
    try {
      size_t begin = static_cast<size_t>(b * opts_.batch_size);
      size_t end = std::min(indices_.size(), begin + static_cast<size_t>(opts_.batch_size));
      batch = make_batch({indices_.begin() + begin, indices_.begin() + end}, epoch_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ready_[b] = std::move(batch);
    cv_.notify_all();
  }
}

bool Loader::next(Batch& out) {
  if (consumed_ >= num_batches_) return false;
  if (opts_.workers == 0) {
    size_t begin = static_cast<size_t>(consumed_ * opts_.batch_size);
    size_t end = std::min(indices_.size(), begin + static_cast<size_t>(opts_.batch_size));
    out = make_batch({indices_.begin() + begin, indices_.begin() + end}, epoch_);
    ++consumed_;
    return true;
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return error_ || ready_.count(consumed_); });
  if (error_) std::rethrow_exception(error_);
  out = std::move(ready_[consumed_]);
  ready_.erase(consumed_);
  ++consumed_;
  cv_.notify_all();
  return true;
}

size_t Loader::cached_samples() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return cache_.size();
}

int64_t Loader::cached_bytes() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return cache_used_;
}

cv::Mat Loader::transformed(size_t index, int64_t epoch, int64_t& label) const {
  if (cacheable_) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auto it = cache_.find(index); it != cache_.end()) {
      label = it->second.label;
      return it->second.image;  // shared, never written: make_batch copies it into the batch
    }
  }
  Sample s = dataset_->get(index);
  Rng rng(Rng::mix(opts_.seed, static_cast<uint64_t>(epoch), index));
  for (const auto& t : transforms_) t->apply(s.image, rng);
  cv::Mat img;
  s.image.convertTo(img, CV_32F);  // no scaling: value ranges are the transforms' business
  if (!img.isContinuous()) img = img.clone();
  label = s.label;
  if (cacheable_) {
    const int64_t bytes = static_cast<int64_t>(img.total() * img.elemSize());
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_used_ + bytes <= opts_.cache_bytes && cache_.emplace(index, Kept{img, label}).second) cache_used_ += bytes;
  }
  return img;
}

Batch Loader::make_batch(const std::vector<size_t>& indices, int64_t epoch) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  Batch batch;
  batch.labels = torch::empty({n}, torch::kLong);
  batch.indices = torch::empty({n}, torch::kLong);
  int64_t C = 0, H = 0, W = 0;
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = -1;
    const cv::Mat img = transformed(indices[i], epoch, label);
    if (i == 0) {
      C = img.channels(), H = img.rows, W = img.cols;
      // NHWC storage: a sample's HxWxC floats are contiguous, exactly OpenCV's layout.
      batch.images = torch::empty({n, H, W, C}, torch::kFloat);
    } else if (img.channels() != C || img.rows != H || img.cols != W) {
      throw UserError("sample " + std::to_string(indices[i]) + " is " + std::to_string(img.rows) + "x" +
                      std::to_string(img.cols) + "x" + std::to_string(img.channels()) + " but sample " +
                      std::to_string(indices[0]) + " of the same batch is " + std::to_string(H) + "x" +
                      std::to_string(W) + "x" + std::to_string(C) +
                      ": add a `resize` transform so that every image has the same size");
    }
    std::memcpy(batch.images.data_ptr<float>() + i * H * W * C, img.ptr<float>(), sizeof(float) * H * W * C);
    batch.labels.data_ptr<int64_t>()[i] = label;
    batch.indices.data_ptr<int64_t>()[i] = static_cast<int64_t>(indices[i]);
  }
  if (n == 0) return batch;
  // [N,H,W,C] -> [N,C,H,W]: a free view in channels-last, one copy to contiguous NCHW otherwise.
  batch.images = batch.images.permute({0, 3, 1, 2});
  batch.images = opts_.channels_last ? batch.images.contiguous(at::MemoryFormat::ChannelsLast)
                                     : batch.images.contiguous();
  return batch;
}

}  // namespace engine
