#include "engine/trainer/model_ema.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>

#include "engine/core/errors.h"
#include "tests/support/paths.h"

using namespace engine;

namespace {

// The first `n` labelled MNIST rows as a [n, 1, 28, 28] float batch in 0..1 and their labels.
std::pair<torch::Tensor, torch::Tensor> mnist_batch(int n) {
  std::ifstream in(engine::test::mnist_file("train.csv"));
  std::string line;
  std::getline(in, line);  // header
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  for (int i = 0; i < n && std::getline(in, line); ++i) {
    std::stringstream row(line);
    std::string cell;
    std::getline(row, cell, ',');
    labels.push_back(std::stoll(cell));
    while (std::getline(row, cell, ',')) pixels.push_back(std::stof(cell) / 255.0f);
  }
  REQUIRE(labels.size() == static_cast<size_t>(n));
  REQUIRE(pixels.size() == static_cast<size_t>(n) * 784);
  return {torch::tensor(pixels).view({n, 1, 28, 28}), torch::tensor(labels, torch::kLong)};
}

// conv (channels-last weight) + BatchNorm (running stats, int64 num_batches_tracked) + head.
torch::nn::Sequential small_net() {
  torch::manual_seed(7);
  torch::nn::Sequential net(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).stride(2)),
                            torch::nn::BatchNorm2d(4), torch::nn::ReLU(),
                            torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)),
                            torch::nn::Flatten(), torch::nn::Linear(4, 10));
  auto& w = net[0]->named_parameters()["weight"];
  w.set_data(w.detach().contiguous(torch::MemoryFormat::ChannelsLast));
  return net;
}

// One real SGD step on the MNIST batch: changes every parameter and the BN buffers.
void train_step(torch::nn::Sequential& net, const torch::Tensor& x, const torch::Tensor& y, double lr) {
  net->train();
  auto loss = torch::nn::functional::cross_entropy(net->forward(x), y);
  net->zero_grad();
  loss.backward();
  torch::NoGradGuard no_grad;
  for (auto& p : net->parameters()) p.sub_(lr * p.grad());
}

std::map<std::string, torch::Tensor> snapshot(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (auto& p : m.named_parameters()) out[p.key()] = p.value().detach().clone();
  for (auto& b : m.named_buffers()) out[b.key()] = b.value().detach().clone();
  return out;
}

}  // namespace

TEST_CASE("ModelEma follows ema = d * ema + (1 - d) * model over real training steps, buffers included") {
  auto [x, y] = mnist_batch(16);
  auto net = small_net();
  ModelEma ema(*net, 0.9, /*warmup=*/false);
  // Keys are the module's dotted names in state_dict order; the bias-less modules add nothing.
  std::vector<std::string> keys;
  for (auto& [k, t] : ema.tensors()) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                         "1.running_var", "1.num_batches_tracked", "5.weight", "5.bias"});
  CHECK(ema.tensors()[0].second.is_contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& [k, t] : ema.tensors()) CHECK_FALSE(t.requires_grad());

  // The expected EMA, in double, from the definition.
  std::map<std::string, torch::Tensor> expected;
  for (auto& [k, t] : snapshot(*net)) expected[k] = t.to(torch::kDouble);
  for (int step = 0; step < 3; ++step) {
    train_step(net, x, y, 0.5);
    ema.update(*net, step);
    for (auto& [k, t] : snapshot(*net)) {
      if (t.is_floating_point())
        expected[k] = 0.9 * expected[k] + 0.1 * t.to(torch::kDouble);
      else
        expected[k] = t.to(torch::kDouble);  // num_batches_tracked is copied
    }
  }
  for (auto& [k, t] : ema.tensors()) {
    INFO(k);
    CHECK(torch::allclose(t.to(torch::kDouble), expected[k], /*rtol=*/1e-5, /*atol=*/1e-7));
  }
  auto model_now = snapshot(*net);
  CHECK(ema.tensors()[6].second.item<int64_t>() == 3);  // three train-mode forwards
  // After 3 steps with d = 0.9 the EMA lags the model: it differs from it (the test can fail).
  CHECK_FALSE(torch::allclose(ema.tensors()[0].second, model_now["0.weight"]));
  CHECK(ema.tensors()[0].second.is_contiguous(torch::MemoryFormat::ChannelsLast));
}

TEST_CASE("ModelEma warmup: decay = min(decay, (1 + step) / (10 + step))") {
  auto net = small_net();
  ModelEma plain(*net);
  CHECK(plain.options().decay == 0.9998);
  CHECK_FALSE(plain.options().warmup);
  CHECK(plain.decay_at(0) == 0.9998);
  ModelEma warm(*net, 0.9998, /*warmup=*/true);
  CHECK(warm.decay_at(0) == doctest::Approx(0.1));
  CHECK(warm.decay_at(8) == doctest::Approx(0.5));
  CHECK(warm.decay_at(80) == doctest::Approx(0.9));
  CHECK(warm.decay_at(1000000) == 0.9998);
  CHECK(ModelEma(*net, 0.5, true).decay_at(100) == 0.5);
  CHECK_THROWS_AS(ModelEma(*net, 1.5, false), std::invalid_argument);

  // The first warm update moves 90 % of the way to the model.
  auto [x, y] = mnist_batch(8);
  auto before = warm.tensors()[7].second.clone();  // 5.weight
  train_step(net, x, y, 0.5);
  warm.update(*net, 0);
  auto after = net->named_parameters()["5.weight"].detach();
  CHECK(torch::allclose(warm.tensors()[7].second, 0.1 * before + 0.9 * after, 1e-6, 1e-7));
}

TEST_CASE("ModelEma swap_into twice is the identity, bit for bit, and keeps the model's tensors") {
  auto [x, y] = mnist_batch(16);
  auto net = small_net();
  ModelEma ema(*net, 0.5, false);
  for (int step = 0; step < 2; ++step) {
    train_step(net, x, y, 0.5);
    ema.update(*net, step);
  }
  auto model_before = snapshot(*net);
  std::map<std::string, torch::Tensor> ema_before;
  for (auto& [k, t] : ema.tensors()) ema_before[k] = t.clone();
  auto weight = net->named_parameters()["0.weight"];
  const void* weight_data = weight.data_ptr();

  ema.swap_into(*net);
  auto swapped = snapshot(*net);
  for (auto& [k, t] : ema.tensors()) {
    INFO(k);
    CHECK(torch::equal(swapped[k], ema_before[k]));  // the model now holds the EMA values
    CHECK(torch::equal(t, model_before[k]));         // and the EMA the training values
  }
  // Same tensor object and storage (the optimizer's references stay valid), still channels-last.
  CHECK(net->named_parameters()["0.weight"].data_ptr() == weight_data);
  CHECK(net->named_parameters()["0.weight"].is_contiguous(torch::MemoryFormat::ChannelsLast));
  CHECK(net->named_parameters()["0.weight"].requires_grad());

  ema.swap_into(*net);
  auto back = snapshot(*net);
  for (auto& [k, t] : ema.tensors()) {
    INFO(k);
    CHECK(torch::equal(back[k], model_before[k]));
    CHECK(torch::equal(t, ema_before[k]));
  }
}

TEST_CASE("ModelEma state round trip, set(), and mismatched models") {
  auto [x, y] = mnist_batch(8);
  auto net = small_net();
  ModelEma ema(*net, 0.9, false);
  train_step(net, x, y, 0.5);
  ema.update(*net, 0);
  NamedTensors state = ema.state();
  REQUIRE(state.size() == ema.tensors().size());
  CHECK(state[6].first == "1.num_batches_tracked");
  CHECK(state[6].second.dtype() == torch::kLong);  // the counter keeps its integer dtype

  // A fresh EMA of another instance loads the state exactly.
  auto other = small_net();
  ModelEma restored(*other, 0.9, false);
  restored.load_state(state);
  for (size_t i = 0; i < state.size(); ++i) {
    INFO(state[i].first);
    CHECK(torch::equal(restored.tensors()[i].second, ema.tensors()[i].second));
  }
  CHECK(restored.tensors()[0].second.is_contiguous(torch::MemoryFormat::ChannelsLast));

  NamedTensors missing(state.begin() + 1, state.end());
  CHECK_THROWS_AS(restored.load_state(missing), UserError);
  NamedTensors extra = state;
  extra.emplace_back("2.weight", torch::zeros({1}));
  CHECK_THROWS_AS(restored.load_state(extra), UserError);
  NamedTensors wrong = state;
  wrong[7].second = torch::zeros({10, 5});
  CHECK_THROWS_AS(restored.load_state(wrong), UserError);
  CHECK(torch::equal(restored.tensors()[0].second, ema.tensors()[0].second));  // unchanged by failures

  restored.set(*net);
  CHECK(torch::equal(restored.tensors()[7].second, net->named_parameters()["5.weight"]));

  torch::nn::Sequential different(torch::nn::Linear(4, 10));
  CHECK_THROWS_AS(ema.update(*different, 1), std::invalid_argument);
  CHECK_THROWS_AS(ema.swap_into(*different), std::invalid_argument);
}
