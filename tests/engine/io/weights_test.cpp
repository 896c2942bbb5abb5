#include "engine/io/weights.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include "engine/core/errors.h"
#include "tests/support/paths.h"

using namespace engine;
namespace nn = torch::nn;

namespace {
// Linear + BatchNorm: parameters, float buffers and the I64 num_batches_tracked counter.
nn::Sequential small_net() { return nn::Sequential(nn::Linear(3, 4), nn::BatchNorm1d(4)); }

std::string weights_error(nn::Module& m, const NamedTensors& t) {
  try {
    load_weights(m, t, "w.safetensors");
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST_CASE("model_tensors lists parameters and buffers in state_dict order as CPU copies") {
  auto net = small_net();
  NamedTensors t = model_tensors(*net);
  std::vector<std::string> keys;
  for (const auto& [k, v] : t) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                                         "1.running_var", "1.num_batches_tracked"});
  CHECK((t[0].second.scalar_type() == torch::kFloat));
  CHECK((t[6].second.scalar_type() == torch::kLong));
  // A copy: changing the model afterwards does not change what was taken.
  torch::NoGradGuard g;
  net[0]->as<nn::Linear>()->weight.fill_(7);
  CHECK(t[0].second.max().item<float>() != 7.0f);
}

TEST_CASE("model_tensors_live gives the same keys and values as the live tensors, without copies") {
  auto net = small_net();
  NamedTensors live = model_tensors_live(*net), copies = model_tensors(*net);
  REQUIRE(live.size() == copies.size());
  for (size_t i = 0; i < live.size(); ++i) {
    CHECK(live[i].first == copies[i].first);
    CHECK(torch::equal(live[i].second, copies[i].second));
  }
  torch::NoGradGuard g;
  net[0]->as<nn::Linear>()->weight.fill_(7);  // the live list sees it, the copies do not
  CHECK(live[0].second.min().item<float>() == 7.0f);
  CHECK(copies[0].second.max().item<float>() != 7.0f);
  nn::Linear lin(2, 2);
  lin->to(torch::kBFloat16);
  for (const auto& [k, v] : model_tensors_live(*lin)) CHECK((v.scalar_type() == torch::kFloat));
}

TEST_CASE("model_tensors converts low-precision floats to fp32") {
  nn::Linear lin(2, 2);
  lin->to(torch::kBFloat16);
  for (const auto& [k, v] : model_tensors(*lin)) CHECK((v.scalar_type() == torch::kFloat));
}

TEST_CASE("load_weights round-trips through a file and keeps the target's memory format") {
  auto dir = test::temp_dir("weights_rt");
  torch::manual_seed(1);
  nn::Conv2d a(nn::Conv2dOptions(2, 3, 3));
  torch::manual_seed(2);
  nn::Conv2d b(nn::Conv2dOptions(2, 3, 3));
  b->weight.set_data(b->weight.data().contiguous(torch::MemoryFormat::ChannelsLast));
  save_safetensors(dir + "/a.safetensors", model_tensors(*a));
  load_weights(*b, dir + "/a.safetensors");
  CHECK(torch::equal(a->weight, b->weight));
  CHECK(torch::equal(a->bias, b->bias));
  CHECK(b->weight.is_contiguous(torch::MemoryFormat::ChannelsLast));
}

TEST_CASE("load_weights is strict, lists every problem and changes nothing on failure") {
  auto net = small_net();
  NamedTensors t = model_tensors(*net);
  auto before = net[0]->as<nn::Linear>()->bias.clone();
  t[1].second = torch::full({5}, 9.0f);          // 0.bias: wrong shape
  t.erase(t.begin() + 2);                        // 1.weight: missing
  t.emplace_back("2.weight", torch::ones({1}));  // unexpected
  t[0].second = torch::full({4, 3}, 9.0f);       // valid, but must not be copied
  std::string err = weights_error(*net, t);
  CHECK(err.find("w.safetensors: weights do not match the model (3 problems)") == 0);
  CHECK(err.find("0.bias: shape [5] in the file, [4] in the model") != std::string::npos);
  CHECK(err.find("1.weight: missing from the file") != std::string::npos);
  CHECK(err.find("2.weight: unexpected key") != std::string::npos);
  CHECK(torch::equal(net[0]->as<nn::Linear>()->bias, before));
  CHECK(net[0]->as<nn::Linear>()->weight.max().item<float>() < 9.0f);
}

TEST_CASE("load_weights converts float dtypes, refuses integer/float mixes, and uses the hint") {
  auto net = small_net();
  NamedTensors t = model_tensors(*net);
  t[0].second = t[0].second.to(torch::kHalf);  // an fp16 checkpoint loads into fp32 parameters
  load_weights(*net, t, "half");
  t[6].second = t[6].second.to(torch::kFloat);  // num_batches_tracked must stay an integer
  WeightHint hint = [](const std::string& key, const torch::Tensor*, const torch::Tensor*) {
    return key == "1.num_batches_tracked" ? std::string("a hint") : std::string();
  };
  try {
    load_weights(*net, t, "mixed", hint);
    FAIL("expected an error");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()).find(
              "1.num_batches_tracked: dtype Float in the file cannot load into Long (a hint)") !=
          std::string::npos);
  }
}
