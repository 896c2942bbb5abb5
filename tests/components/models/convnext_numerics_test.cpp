// ConvNeXt numerics: timm init, bf16 autocast, channels-last equivalence, weights save/load and
// strict pretrained loading.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include "components/models/convnext.h"
#include "engine/core/errors.h"
#include "engine/io/weights.h"
#include "tests/components/models/autocast_cpu.h"
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
