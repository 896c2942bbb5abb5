// ConvNeXt architecture parity with timm (shared/reference/timm.md): parameter counts, state_dict
// keys and shapes, forward shapes, input errors, registry wiring.
#include "components/models/convnext.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "components/models/all.h"
#include "engine/core/errors.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/paths.h"

using namespace engine;
using test::count_params;
using test::opts;
using test::user_error;

// Keys: 20 + 9 * sum(depths). timm.md lists 140 for nano, but its own formula with nano's depths
// (2, 2, 8, 2), which the parameter counts confirm, gives 146.
TEST_CASE("parameter counts and state_dict key counts match timm for every variant") {
  struct Row {
    const char* name;
    int64_t imagenet, mnist;  // parameters with (in 3, 1000 classes) and (in 1, 10 classes)
    size_t keys;
  };
  const Row rows[] = {
      {"convnext_atto", 3695520, 3376450, 128},   {"convnext_femto", 5217784, 4835098, 128},
      {"convnext_pico", 9045672, 8535754, 128},   {"convnext_nano", 15593560, 14956410, 146},
      {"convnext_tiny", 28589128, 27824746, 182}, {"convnext_small", 50223688, 49459306, 344},
  };
  for (const auto& r : rows) {
    CAPTURE(std::string(r.name));
    {  // one model alive at a time: built, counted, freed
      auto m = make_convnext(r.name, opts(3, 1000, false));
      CHECK(count_params(*m) == r.imagenet);
      CHECK(m->named_parameters().size() == r.keys);
      CHECK(m->named_buffers().size() == 0);
    }
    CHECK(count_params(*make_convnext(r.name, opts(1, 10, false))) == r.mnist);
  }
}

TEST_CASE("convnext_atto keys and shapes are exactly timm's, in timm's order") {
  auto m = make_convnext("convnext_atto", opts(3, 1000));
  const int64_t d[4] = {40, 80, 160, 320}, depth[4] = {2, 2, 6, 2};
  std::vector<std::pair<std::string, std::vector<int64_t>>> expected = {{"stem.0.weight", {40, 3, 4, 4}},
                                                                        {"stem.0.bias", {40}},
                                                                        {"stem.1.weight", {40}},
                                                                        {"stem.1.bias", {40}}};
  for (int i = 0; i < 4; ++i) {
    std::string s = "stages." + std::to_string(i) + ".";
    if (i > 0) {
      expected.push_back({s + "downsample.0.weight", {d[i - 1]}});
      expected.push_back({s + "downsample.0.bias", {d[i - 1]}});
      expected.push_back({s + "downsample.1.weight", {d[i], d[i - 1], 2, 2}});
      expected.push_back({s + "downsample.1.bias", {d[i]}});
    }
    const int64_t c = d[i];
    for (int j = 0; j < depth[i]; ++j) {
      std::string b = s + "blocks." + std::to_string(j) + ".";
      expected.push_back({b + "gamma", {c}});
      expected.push_back({b + "conv_dw.weight", {c, 1, 7, 7}});
      expected.push_back({b + "conv_dw.bias", {c}});
      expected.push_back({b + "norm.weight", {c}});
      expected.push_back({b + "norm.bias", {c}});
      expected.push_back({b + "mlp.fc1.weight", {4 * c, c, 1, 1}});  // conv_mlp
      expected.push_back({b + "mlp.fc1.bias", {4 * c}});
      expected.push_back({b + "mlp.fc2.weight", {c, 4 * c, 1, 1}});
      expected.push_back({b + "mlp.fc2.bias", {c}});
    }
  }
  expected.push_back({"head.norm.weight", {320}});
  expected.push_back({"head.norm.bias", {320}});
  expected.push_back({"head.fc.weight", {1000, 320}});
  expected.push_back({"head.fc.bias", {1000}});

  auto params = m->named_parameters();
  REQUIRE(params.size() == expected.size());
  size_t i = 0;
  for (const auto& p : params) {
    CAPTURE(expected[i].first);
    CHECK(p.key() == expected[i].first);
    CHECK(p.value().sizes().vec() == expected[i].second);
    ++i;
  }
}

TEST_CASE("convnext_tiny uses Linear MLP weights [4C, C]") {
  auto m = make_convnext("convnext_tiny", opts(3, 1000));
  auto p = m->named_parameters();
  CHECK(p["stages.0.blocks.0.mlp.fc1.weight"].sizes().vec() == std::vector<int64_t>{384, 96});
  CHECK(p["stages.3.blocks.2.mlp.fc2.weight"].sizes().vec() == std::vector<int64_t>{768, 3072});
  CHECK(p["stages.3.downsample.1.weight"].sizes().vec() == std::vector<int64_t>{768, 384, 2, 2});
}

TEST_CASE("forward gives logits, or pooled features when num_classes = 0") {
  torch::manual_seed(0);
  auto m = make_convnext("convnext_atto", opts(1, 10));
  m->eval();
  torch::NoGradGuard g;
  CHECK(m->forward(torch::randn({2, 1, 32, 32})).sizes().vec() == std::vector<int64_t>{2, 10});
  CHECK(m->forward(torch::randn({2, 1, 56, 56})).sizes().vec() == std::vector<int64_t>{2, 10});
  CHECK(m->forward(torch::randn({1, 1, 33, 47})).sizes().vec() == std::vector<int64_t>{1, 10});

  auto f = make_convnext("convnext_atto", opts(1, 0));
  CHECK(f->num_classes() == 0);
  CHECK(f->named_parameters().size() == 126);  // no head.fc
  CHECK(f->forward(torch::randn({3, 1, 32, 32})).sizes().vec() == std::vector<int64_t>{3, 320});
}

TEST_CASE("too small or wrongly shaped inputs give a UserError that says how to fix it") {
  auto m = make_convnext("convnext_atto", opts(1, 10));
  CHECK(m->min_input_size() == 32);
  CHECK(user_error([&] {
          m->forward(torch::zeros({2, 1, 28, 28}));
        }) ==
        "convnext_atto needs inputs of at least 32x32, got 28x28: resize, e.g. [[data.train_transforms]] "
        "name = \"resize\" size = [32, 32]");
  CHECK(user_error([&] { m->forward(torch::zeros({2, 1, 64, 31})); }).find("got 64x31") != std::string::npos);
  std::string err = user_error([&] { m->forward(torch::zeros({2, 3, 32, 32})); });
  CHECK(err.find("in_chans = 1") != std::string::npos);
  CHECK(err.find("[2, 3, 32, 32]") != std::string::npos);
}

TEST_CASE("stages() covers every parameter, input to output") {
  auto m = make_convnext("convnext_atto", opts(1, 10));
  auto st = m->stages();
  std::vector<std::string> names;
  for (const auto& s : st) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"stem", "stages.0", "stages.1", "stages.2", "stages.3", "head"});
  int last = 0;
  for (const auto& p : m->named_parameters()) {  // registration order runs input to output
    int s = stage_of(st, p.key());
    CHECK_MESSAGE(s >= last, p.key());
    last = std::max(last, s);
  }
  CHECK(last == 5);
  CHECK(stage_of(st, "stages.10.x") == -1);  // a prefix matches whole names only
}

TEST_CASE("every variant is registered and builds from a recipe table") {
  ModelRegistry registry("model");
  register_models(registry);
  for (const auto& a : convnext_archs()) CHECK(registry.find(a.name) != nullptr);
  auto docs = registry.describe("convnext_atto");
  std::vector<std::string> keys;
  for (const auto& d : docs) keys.push_back(d.key);
  CHECK(keys == std::vector<std::string>{"in_chans", "num_classes", "drop_path_rate", "drop_rate",
                                         "pretrained", "channels_last"});

  auto dir = test::temp_dir("convnext_recipe");
  std::string file = dir + "/r.toml";
  auto good = test::parse_model_table(
      registry, file,
      "[model]\nname = \"convnext_atto\"\nin_chans = 1\nnum_classes = 10\nchannels_last = false\n");
  CHECK(good.errors.empty());
  REQUIRE(good.factory);
  auto m = good.factory();
  CHECK(m->num_classes() == 10);
  CHECK(count_params(*m) == 3376450);

  auto bad = test::parse_model_table(
      registry, file,
      "[model]\nname = \"convnext_atto\"\npretrained = \"missing.safetensors\"\ndrop_path_rate = 1\n");
  CHECK(bad.errors.size() == 2);  // both problems at once, before building anything
}

namespace {

// Logits and every parameter gradient of one training step of convnext_atto on real digits, with
// the kernel switch `env` on (unset) or off (= "0"). gamma = 0.5 instead of timm's 1e-6, so that
// every block's branch counts.
std::vector<torch::Tensor> training_step(const char* env, bool on, int64_t size, uint64_t seed) {
  const auto digits = test::mnist_batch(16, size);
  if (on) unsetenv(env);
  else setenv(env, "0", 1);
  torch::manual_seed(seed);
  auto m = make_convnext("convnext_atto", opts(1, 10));
  {
    torch::NoGradGuard g;
    for (auto& p : m->named_parameters())
      if (p.key().find("gamma") != std::string::npos) p.value().fill_(0.5);
  }
  m->train();
  auto logits = m->forward(digits.images);
  torch::nn::functional::cross_entropy(logits, digits.labels).backward();
  std::vector<torch::Tensor> out{logits.detach()};
  for (auto& p : m->parameters()) {
    CHECK(p.grad().sizes() == p.sizes());
    out.push_back(p.grad().clone());
  }
  unsetenv(env);
  return out;
}

// The kernel behind `env` and torch's op give the same step up to float summation order, and both
// really ran (the bits differ somewhere).
void check_same_step(const char* env, int64_t size, uint64_t seed) {
  auto off = training_step(env, false, size, seed), on = training_step(env, true, size, seed);
  REQUIRE(off.size() == on.size());
  bool bits_differ = false;
  for (size_t i = 0; i < off.size(); ++i) {
    bits_differ = bits_differ || !torch::equal(on[i], off[i]);
    CAPTURE(i);
    const double scale = off[i].abs().max().item<double>();
    CHECK(scale > 0);
    CHECK((on[i] - off[i]).abs().max().item<double>() <= 1e-4 * scale + 1e-7);
  }
  CHECK(bits_differ);
}

}  // namespace

// The MLP runs as GEMMs on the pixel rows when an optimised BLAS is loaded, as 1x1 convolutions
// otherwise (ENGINE_MLP_GEMM=0 forces them).
TEST_CASE("the MLP as GEMMs and as 1x1 convolutions give the same logits and gradients") {
  check_same_step("ENGINE_MLP_GEMM", 40, 3);
}

// The stem and downsample convolutions run as GEMMs on patch rows alongside the MLP GEMMs
// (ENGINE_PATCHIFY_GEMM=0 keeps oneDNN's convolutions). At 42x42 the stem floors
// (42 = 4 x 10 + 2) and so does stage 2's downsample (5x5 -> 2x2).
TEST_CASE("the stem and downsamples as patch GEMMs and as convolutions give the same logits and gradients") {
  check_same_step("ENGINE_PATCHIFY_GEMM", 42, 5);
  // The weights keep timm's shape and key.
  auto m = make_convnext("convnext_atto", opts(1, 10));
  auto params = m->named_parameters();
  CHECK(params["stem.0.weight"].sizes() == torch::IntArrayRef({40, 1, 4, 4}));
  CHECK(params["stages.2.downsample.1.weight"].sizes() == torch::IntArrayRef({160, 80, 2, 2}));
}
