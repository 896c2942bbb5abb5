// ConvNeXt numerics: timm init, bf16 autocast, channels-last equivalence, weights save/load and
// strict pretrained loading.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "components/models/convnext.h"
#include "components/models/layers.h"
#include "engine/core/sample_draws.h"
#include "engine/core/errors.h"
#include "engine/io/weights.h"
#include "tests/components/models/autocast_cpu.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/paths.h"

using namespace engine;
using test::AutocastCpu;
using test::max_diff;
using test::opts;

namespace {

std::unique_ptr<ConvNeXt> seeded(uint64_t seed, const ConvNeXtOptions& o,
                                 const std::string& name = "convnext_atto") {
  torch::manual_seed(seed);
  auto m = make_convnext(name, o);
  m->eval();
  return m;
}

}  // namespace

TEST_CASE("init follows timm: trunc_normal(.02) weights, zero biases, LN ones/zeros, gamma 1e-6") {
  auto m = seeded(0, opts(3, 1000));
  std::vector<torch::Tensor> weights;
  for (const auto& p : m->named_parameters()) {
    const std::string& k = p.key();
    torch::Tensor v = p.value().detach();
    CAPTURE(k);
    bool is_norm = k.find("norm") != std::string::npos || k == "stem.1.weight" || k == "stem.1.bias" ||
                   k.find("downsample.0.") != std::string::npos;
    if (k.size() > 6 && k.substr(k.size() - 6) == ".gamma") {
      CHECK(torch::all(v == 1e-6f).item<bool>());
    } else if (k.substr(k.size() - 5) == ".bias") {
      CHECK(torch::all(v == 0).item<bool>());
    } else if (is_norm) {
      CHECK(torch::all(v == 1).item<bool>());
    } else {
      weights.push_back(v.flatten());
    }
  }
  torch::Tensor w = torch::cat(weights);
  CHECK(w.numel() > 3'600'000);
  CHECK(w.std().item<double>() == doctest::Approx(0.02).epsilon(0.01));
  CHECK(w.mean().item<double>() == doctest::Approx(0.0).epsilon(1e-4));
  // timm's trunc_normal_(std=.02) keeps its default *absolute* bounds a=-2, b=2, i.e. 100 std:
  // effectively untruncated. So ~4.55% of weights lie beyond 2 std (a +-2 std truncation would give 0).
  CHECK(w.abs().max().item<double>() <= 2.0);
  double beyond = (w.abs() > 0.04).to(torch::kDouble).mean().item<double>();
  CHECK(beyond == doctest::Approx(0.0455).epsilon(0.05));
}

TEST_CASE("same seed gives the same model, another seed a different one") {
  auto a = seeded(7, opts(1, 10)), b = seeded(7, opts(1, 10)), c = seeded(8, opts(1, 10));
  auto pa = a->parameters(), pb = b->parameters(), pc = c->parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  CHECK(!torch::equal(pa[0], pc[0]));
}

TEST_CASE("bf16 autocast forward runs on CPU and stays close to fp32") {
  auto m = seeded(1, opts(1, 10));
  torch::NoGradGuard g;
  torch::Tensor x = torch::randn({4, 1, 32, 32});
  torch::Tensor ref = m->forward(x);
  torch::Tensor low;
  {
    AutocastCpu autocast(torch::kBFloat16);
    low = m->forward(x);
  }
  CHECK((low.scalar_type() == torch::kBFloat16));  // head.fc is a linear: autocast runs it in bf16
  CHECK(torch::isfinite(low).all().item<bool>());
  double scale = ref.abs().max().item<double>();
  CHECK(max_diff(low, ref) < 0.05 * scale + 1e-3);
}

TEST_CASE("bf16 autocast on CPU: the residual stream stays float32 and gradients stay close to fp32's") {
  auto m = seeded(4, opts(1, 10));
  {
    // Layer scales as a trained model has them (timm's start at 1e-6, where every block's gradient
    // is a near-cancelling sum that no low-precision path reproduces).
    torch::NoGradGuard no_grad;
    for (auto& p : m->named_parameters())
      if (p.key().find("gamma") != std::string::npos) p.value().fill_(0.5);
  }
  const auto batch = test::mnist_batch(32, 40);
  // Every parameter's gradient of the cross-entropy on real digits, with or without bf16 autocast.
  auto gradients = [&](bool bf16) {
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    std::optional<AutocastCpu> autocast;
    if (bf16) autocast.emplace(torch::kBFloat16);
    torch::Tensor loss = torch::nn::functional::cross_entropy(m->forward(batch.images).to(torch::kFloat), batch.labels);
    autocast.reset();
    loss.backward();
    std::map<std::string, torch::Tensor> g;
    for (const auto& p : m->named_parameters()) {
      INFO(p.key());
      REQUIRE(p.value().grad().defined());
      g[p.key()] = p.value().grad().clone();
    }
    return g;
  };
  {
    // Its own autocast region: the cast cache of a no-grad forward would hold casts without history.
    AutocastCpu autocast(torch::kBFloat16);
    torch::NoGradGuard no_grad;  // only the MLPs' GEMMs and the head's fc run in bf16
    CHECK((m->forward_features(batch.images).scalar_type() == torch::kFloat));
  }
  const auto ref = gradients(false), low = gradients(true);
  auto lowest_cosine = [&](const std::map<std::string, torch::Tensor>& g) {
    double worst = 1;
    std::string worst_key;
    for (const auto& [k, a] : ref) {
      const double cos = torch::cosine_similarity(a.flatten(), g.at(k).flatten(), 0).item<double>();
      if (cos < worst) worst = cos, worst_key = k;
    }
    MESSAGE("lowest cosine(bf16 grad, fp32 grad) = " << worst << " (" << worst_key << ")");
    return worst;
  };
  CHECK(lowest_cosine(low) > 0.999);  // measured 0.99998 (Zen 4, oneDNN bf16 GEMMs), 0.999984 (AVX2 EPYC, emulated)
  // ENGINE_AUTOCAST_MLP_ONLY=0 (README): autocast casts every op it lists again: other numbers.
  setenv("ENGINE_AUTOCAST_MLP_ONLY", "0", 1);
  const auto everywhere = gradients(true);
  unsetenv("ENGINE_AUTOCAST_MLP_ONLY");
  bool differs = false;
  for (const auto& [k, g] : everywhere) differs = differs || !torch::equal(g, low.at(k));
  CHECK(differs);
  CHECK(lowest_cosine(everywhere) > 0.99);  // measured 0.99996
}

TEST_CASE("channels_last on and off give the same outputs and gradients") {
  auto cl = seeded(2, opts(1, 10, true));
  auto nchw = seeded(2, opts(1, 10, false));
  CHECK(cl->named_parameters()["stem.0.weight"].is_contiguous(torch::MemoryFormat::ChannelsLast));
  CHECK(nchw->named_parameters()["stem.0.weight"].is_contiguous());
  torch::Tensor x = torch::randn({2, 1, 56, 56});
  torch::Tensor ya = cl->forward(x), yb = nchw->forward(x);
  CHECK(max_diff(ya, yb) < 1e-5);
  ya.square().sum().backward();
  yb.square().sum().backward();
  auto ga = cl->named_parameters()["stages.0.blocks.0.conv_dw.weight"].grad();
  auto gb = nchw->named_parameters()["stages.0.blocks.0.conv_dw.weight"].grad();
  CHECK(max_diff(ga, gb) < 1e-5 * (1 + gb.abs().max().item<double>()));
}

TEST_CASE("drop_path and dropout act only in training") {
  ConvNeXtOptions o = opts(1, 10);
  o.drop_path_rate = 0.5;
  o.drop_rate = 0.5;
  auto m = seeded(3, o);
  torch::NoGradGuard g;
  torch::Tensor x = torch::randn({8, 1, 32, 32});
  CHECK(torch::equal(m->forward(x), m->forward(x)));
  m->train();
  CHECK(!torch::equal(m->forward(x), m->forward(x)));
}

TEST_CASE("drop_path and dropout masks belong to the sample: 2 ranks x 4 drop what 1 rank x 8 drops") {
  // What the trainer does per micro-batch (engine/core/sample_draws.h): a scope keyed by the
  // micro-batch, local sample j = global position rank + j * world (sampler.h).
  torch::Tensor x = torch::ones({8, 6, 3, 3});
  auto masks = [&](int64_t rank, int64_t world) {
    SampleDrawScope scope(11, rank, world);
    torch::Tensor part = x.slice(0, rank, 8, world);
    return std::make_pair(drop_path(part, 0.5, true), engine::dropout(part, 0.5, true));
  };
  auto [path1, drop1] = masks(0, 1);
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto [path2, drop2] = masks(rank, 2);
    CHECK(torch::equal(path2, path1.slice(0, rank, 8, 2)));
    CHECK(torch::equal(drop2, drop1.slice(0, rank, 8, 2)));
  }
  // drop_path zeroes whole samples, dropout single elements; survivors scaled by 1 / (1 - p).
  for (int64_t i = 0; i < 8; ++i) {
    const double v = path1[i].max().item<double>();
    CHECK((v == 0.0 || v == 2.0));
    CHECK(path1[i].min().item<double>() == v);
  }
  CHECK(((drop1 == 0) | (drop1 == 2)).all().item<bool>());
  // A different micro-batch draws other masks.
  SampleDrawScope other(12, 0, 1);
  CHECK(!torch::equal(engine::dropout(x, 0.5, true), drop1));
}

TEST_CASE("drop_path and dropout drop at their rate, and outside the trainer torch::manual_seed repeats them") {
  torch::Tensor x = torch::ones({20000, 1});
  SampleDrawScope scope(3, 0, 1);
  // 20,000 samples at p = 0.3: sd of the dropped fraction 0.0032.
  CHECK(drop_path(x, 0.3, true).eq(0).to(torch::kDouble).mean().item<double>() == doctest::Approx(0.3).epsilon(0.05));
  torch::Tensor y = torch::ones({100, 200});
  CHECK(engine::dropout(y, 0.3, true).eq(0).to(torch::kDouble).mean().item<double>() ==
        doctest::Approx(0.3).epsilon(0.05));
  CHECK(engine::dropout(y, 1.0, true).abs().sum().item<double>() == 0.0);
  auto unscoped = [&](uint64_t seed) {
    torch::manual_seed(seed);
    // A thread with no scope: the key comes from torch's generator.
    torch::Tensor out;
    std::thread([&] { out = engine::dropout(y, 0.5, true); }).join();
    return out;
  };
  CHECK(torch::equal(unscoped(5), unscoped(5)));
  CHECK(!torch::equal(unscoped(5), unscoped(6)));
}

TEST_CASE("model_tensors + save_safetensors, then load_weights into a differently seeded model") {
  auto dir = test::temp_dir("convnext_weights");
  std::string file = dir + "/model.safetensors";
  auto a = seeded(4, opts(1, 10));
  save_safetensors(file, model_tensors(*a));
  auto b = seeded(5, opts(1, 10));
  torch::Tensor x = torch::randn({2, 1, 32, 32});
  CHECK(!torch::equal(a->forward(x), b->forward(x)));
  load_weights(*b, file);
  CHECK(torch::equal(a->forward(x), b->forward(x)));

  ConvNeXtOptions po = opts(1, 10, false);  // also loads into an NCHW model through `pretrained`
  po.pretrained = file;
  auto c = seeded(6, po);
  CHECK(max_diff(a->forward(x), c->forward(x)) < 1e-5);
}

TEST_CASE("pretrained: in_chans and num_classes adapted as timm, a truly wrong shape still refused") {
  auto dir = test::temp_dir("convnext_pretrained");
  std::string file = dir + "/imagenet.safetensors";
  NamedTensors imagenet = model_tensors(*seeded(0, opts(3, 1000)));
  save_safetensors(file, imagenet);
  auto load = [&](ConvNeXtOptions o, const std::string& name = "convnext_atto") {
    o.pretrained = file;
    return seeded(1, o, name);
  };
  auto error_for = [&](ConvNeXtOptions o, const std::string& name = "convnext_atto") -> std::string {
    try {
      load(o, name);
    } catch (const UserError& e) {
      return e.what();
    }
    return "(no error)";
  };
  // Grey images, 10 classes: stem.0.weight summed over RGB, head.fc kept fresh (timm's rules).
  auto m = load(opts(1, 10));
  CHECK(m->pretrained_note() == "pretrained convnext_atto from " + file +
                                    ": stem.0.weight adapted 3 -> 1 input channels (sum over RGB, as timm); "
                                    "classifier head.fc re-initialised (1000 -> 10 classes)");
  auto p = m->named_parameters();
  CHECK(torch::equal(p["stem.0.weight"], imagenet[0].second.sum(1, true)));
  CHECK(torch::equal(p["head.fc.weight"], seeded(1, opts(1, 10))->named_parameters()["head.fc.weight"]));
  for (const auto& [name, t] : imagenet) {
    const std::string& k = name;  // doctest's message is a lambda: clang (C++17) cannot capture a binding
    if (k != "stem.0.weight" && k.rfind("head.fc.", 0) != 0) CHECK_MESSAGE(torch::equal(p[k], t), k);
  }
  CHECK(load(opts(3, 0))->pretrained_note().find("classifier head.fc dropped") != std::string::npos);

  // A tensor whose shape no adaptation explains is refused, naming the key and both shapes.
  NamedTensors edited = imagenet;
  for (auto& [k, t] : edited)
    if (k == "stages.1.blocks.0.conv_dw.weight") t = t.slice(0, 0, 40).contiguous();
  save_safetensors(file, edited);
  std::string e = error_for(opts(1, 10));
  CHECK(e.find(file) == 0);
  CHECK(
      e.find(
          "stages.1.blocks.0.conv_dw.weight: shape [40, 1, 7, 7] in the file, [80, 1, 7, 7] in the model") !=
      std::string::npos);

  save_safetensors(file, imagenet);
  e = error_for(opts(3, 1000), "convnext_femto");  // another architecture: one summary line
  CHECK(e.find("looks like a checkpoint of another architecture than convnext_femto") != std::string::npos);
  CHECK(e.find("of another shape, e.g. stem.0.bias [40] in the file, [48] in the model") !=
        std::string::npos);
}
