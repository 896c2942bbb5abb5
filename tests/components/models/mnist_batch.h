#pragma once
// Real MNIST digits as a model input batch, for the model tests: the first rows of
// data/mnist/train.csv, scaled to 0..1, normalised with MNIST's mean/std, resized (bilinear).
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/paths.h"

namespace engine::test {

struct MnistBatch {
  torch::Tensor images;  // [n, channels, size, size] float, normalised
  torch::Tensor labels;  // [n] int64
};

/// `n` digits from train.csv (skipping the first `skip`), `channels` copies of the grey plane.
inline MnistBatch mnist_batch(int64_t n, int64_t size = 28, int64_t channels = 1, int64_t skip = 0) {
  std::ifstream in(mnist_file("train.csv"));
  std::string line;
  std::getline(in, line);  // header
  for (int64_t i = 0; i < skip; ++i) std::getline(in, line);
  torch::Tensor pixels = torch::empty({n, 784});
  torch::Tensor labels = torch::empty({n}, torch::kLong);
  auto px = pixels.accessor<float, 2>();
  auto lb = labels.accessor<int64_t, 1>();
  for (int64_t r = 0; r < n && std::getline(in, line); ++r) {
    std::stringstream ss(line);
    std::string cell;
    std::getline(ss, cell, ',');
    lb[r] = std::stoll(cell);
    for (int64_t c = 0; c < 784 && std::getline(ss, cell, ','); ++c) px[r][c] = std::stof(cell) / 255.0f;
  }
  torch::Tensor x = ((pixels - 0.1310) / 0.30854).view({n, 1, 28, 28});
  if (size != 28)
    x = torch::nn::functional::interpolate(x, torch::nn::functional::InterpolateFuncOptions()
                                                  .size(std::vector<int64_t>{size, size})
                                                  .mode(torch::kBilinear)
                                                  .align_corners(false));
  return {x.expand({n, channels, size, size}).contiguous(), labels};
}

}  // namespace engine::test
