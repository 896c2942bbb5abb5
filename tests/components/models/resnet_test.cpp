// ResNet parity with timm (shared/reference/timm.md): parameter counts, state_dict keys (BatchNorm
// buffers included) in timm's order, shapes and strides, timm's init, forward shapes and input
// errors, channels-last equivalence, bf16 autocast training, stages, registry wiring.
#include "components/models/resnet.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "components/models/all.h"
#include "components/models/frozen_weights.h"
#include "engine/core/errors.h"
#include "engine/io/weights.h"
#include "tests/components/models/autocast_cpu.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/paths.h"

using namespace engine;
using test::count_params;
using test::max_diff;
using test::opts;
using test::seeded_resnet;
using test::user_error;

namespace {

using KeyShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

void add_bn(KeyShapes& k, const std::string& prefix, int64_t c) {
  for (const char* s : {"weight", "bias", "running_mean", "running_var"})
    k.push_back({prefix + "." + s, {c}});
  k.push_back({prefix + ".num_batches_tracked", {}});
}

}  // namespace

TEST_CASE("resnet parameter counts and state_dict entry counts match timm") {
  struct Row {
    const char* name;
    int64_t imagenet, mnist;  // parameters with (in 3, 1000 classes) and (in 1, 10 classes)
    size_t entries;           // state_dict entries: parameters + BatchNorm buffers
  };
  // resnet34's 218 entries: 6 stem + 16 blocks x 12 + 3 shortcuts x 6 + 2 fc (timm.md gives 18, 50).
  const Row rows[] = {{"resnet18", 11689512, 11175370, 122},
                      {"resnet34", 21797672, 21283530, 218},
                      {"resnet50", 25557032, 23522250, 320}};
  for (const auto& r : rows) {
    CAPTURE(std::string(r.name));
    {
      auto m = make_resnet(r.name, opts(3, 1000, false));
      CHECK(count_params(*m) == r.imagenet);
      CHECK(model_tensors(*m).size() == r.entries);
      CHECK(m->named_buffers().size() == (r.entries - m->named_parameters().size()));
    }
    CHECK(count_params(*make_resnet(r.name, opts(1, 10, false))) == r.mnist);
  }
}

TEST_CASE("resnet18 state_dict keys and shapes are exactly timm's, in timm's order") {
  auto m = make_resnet("resnet18", opts(3, 1000));
  KeyShapes expected = {{"conv1.weight", {64, 3, 7, 7}}};
  add_bn(expected, "bn1", 64);
  int64_t inplanes = 64;
  for (int i = 0; i < 4; ++i) {
    const int64_t planes = int64_t{64} << i;
    for (int j = 0; j < 2; ++j) {
      const std::string b = "layer" + std::to_string(i + 1) + "." + std::to_string(j) + ".";
      expected.push_back({b + "conv1.weight", {planes, j == 0 ? inplanes : planes, 3, 3}});
      add_bn(expected, b + "bn1", planes);
      expected.push_back({b + "conv2.weight", {planes, planes, 3, 3}});
      add_bn(expected, b + "bn2", planes);
      if (i > 0 && j == 0) {  // the shortcut comes after the block's own layers in timm's state_dict
        expected.push_back({b + "downsample.0.weight", {planes, inplanes, 1, 1}});
        add_bn(expected, b + "downsample.1", planes);
      }
    }
    inplanes = planes;
  }
  expected.push_back({"fc.weight", {1000, 512}});
  expected.push_back({"fc.bias", {1000}});

  NamedTensors got = model_tensors(*m);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(expected[i].first);
    CHECK(got[i].first == expected[i].first);
    CHECK(got[i].second.sizes().vec() == expected[i].second);
  }
  // The buffers are real BatchNorm state: fp32 statistics and an int64 step counter.
  auto buffers = m->named_buffers();
  CHECK((buffers["bn1.num_batches_tracked"].scalar_type() == torch::kLong));
  CHECK((buffers["layer4.1.bn2.running_var"].scalar_type() == torch::kFloat));
}

TEST_CASE("resnet50 uses timm's Bottleneck: 1x1, 3x3 with the stride, 1x1 to 4x, strided 1x1 shortcut") {
  auto m = make_resnet("resnet50", opts(3, 1000));
  auto p = m->named_parameters();
  CHECK(p["layer1.0.conv1.weight"].sizes().vec() == std::vector<int64_t>{64, 64, 1, 1});
  CHECK(p["layer1.0.conv3.weight"].sizes().vec() == std::vector<int64_t>{256, 64, 1, 1});
  CHECK(p["layer1.0.downsample.0.weight"].sizes().vec() == std::vector<int64_t>{256, 64, 1, 1});
  CHECK(p["layer2.0.conv1.weight"].sizes().vec() == std::vector<int64_t>{128, 256, 1, 1});
  CHECK(p["layer4.2.conv3.weight"].sizes().vec() == std::vector<int64_t>{2048, 512, 1, 1});
  CHECK(p["fc.weight"].sizes().vec() == std::vector<int64_t>{1000, 2048});
  CHECK(p.find("layer1.1.downsample.0.weight") == nullptr);
  auto stride = [&](const std::string& name) {
    return m->named_modules("", /*include_self=*/false)[name]->as<torch::nn::Conv2d>()->options.stride()->at(
        0);
  };
  CHECK(stride("conv1") == 2);
  CHECK(stride("layer1.0.conv2") == 1);
  CHECK(stride("layer2.0.conv1") == 1);
  CHECK(stride("layer2.0.conv2") == 2);  // stride on the 3x3 ("ResNet v1.5", timm and torchvision)
  CHECK(stride("layer2.0.downsample.0") == 2);
  CHECK(stride("layer2.1.conv2") == 1);
  // timm's order inside block 0: conv1, bn1, conv2, bn2, conv3, bn3, then the shortcut.
  NamedTensors t = model_tensors(*m);
  std::vector<std::string> keys;
  for (const auto& kv : t) keys.push_back(kv.first);
  auto at = [&](const std::string& k) { return std::find(keys.begin(), keys.end(), k) - keys.begin(); };
  CHECK(at("layer1.0.bn3.num_batches_tracked") + 1 == at("layer1.0.downsample.0.weight"));
  CHECK(at("layer1.0.downsample.1.num_batches_tracked") + 1 == at("layer1.1.conv1.weight"));
}

TEST_CASE("resnet init follows timm: kaiming_normal fan_out convs, BN 1/0, zero_init_last, default fc") {
  auto m = seeded_resnet(0, opts(3, 1000));
  torch::NoGradGuard g;
  for (const auto& kv : model_tensors(*m)) {
    const std::string& k = kv.first;
    const torch::Tensor& v = kv.second;
    CAPTURE(k);
    auto ends = [&](const std::string& s) {
      return k.size() >= s.size() && k.substr(k.size() - s.size()) == s;
    };
    if (v.dim() == 4) {  // conv: N(0, sqrt(2 / fan_out)), fan_out = out * kh * kw
      const double want = std::sqrt(2.0 / static_cast<double>(v.size(0) * v.size(2) * v.size(3)));
      if (v.numel() >= 16384) CHECK(v.std().item<double>() == doctest::Approx(want).epsilon(0.03));
      CHECK(std::abs(v.mean().item<double>()) < 0.1 * want);
    } else if (k.rfind("fc.", 0) == 0) {  // PyTorch's default Linear init: U(-1/sqrt(512), 1/sqrt(512))
      const double bound = 1.0 / std::sqrt(512.0);
      CHECK(v.abs().max().item<double>() <= bound);
      if (ends(".weight"))
        CHECK(v.std().item<double>() == doctest::Approx(bound / std::sqrt(3.0)).epsilon(0.02));
    } else if (ends("bn2.weight")) {  // BasicBlock's last BN: zero_init_last
      CHECK(torch::all(v == 0).item<bool>());
    } else if (ends(".weight") || ends(".running_var")) {
      CHECK(torch::all(v == 1).item<bool>());
    } else {  // BN bias, running_mean, num_batches_tracked
      CHECK(torch::all(v == 0).item<bool>());
    }
  }
  auto b = seeded_resnet(0, opts(3, 1000)), c = seeded_resnet(1, opts(3, 1000));
  auto pa = m->parameters(), pb = b->parameters(), pc = c->parameters();
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::equal(pa[i], pb[i]));
  CHECK(!torch::equal(pa[0], pc[0]));
  CHECK(!torch::equal(pa.back(), pc.back()));
}

TEST_CASE("resnet forward gives logits, or pooled features when num_classes = 0") {
  auto digits = test::mnist_batch(3, 64);
  auto m = seeded_resnet(0, opts(1, 10));
  m->eval();
  torch::NoGradGuard g;
  CHECK(m->forward(digits.images).sizes().vec() == std::vector<int64_t>{3, 10});
  CHECK(m->forward(test::mnist_batch(2, 32).images).sizes().vec() == std::vector<int64_t>{2, 10});
  CHECK(m->forward(digits.images.slice(2, 0, 47)).sizes().vec() == std::vector<int64_t>{3, 10});

  auto f = seeded_resnet(0, opts(1, 0));
  f->eval();
  CHECK(f->num_classes() == 0);
  CHECK(f->named_parameters().find("fc.weight") == nullptr);
  CHECK(f->forward(digits.images).sizes().vec() == std::vector<int64_t>{3, 512});
  auto f50 = seeded_resnet(0, opts(1, 0), "resnet50");
  f50->eval();
  CHECK(f50->num_features() == 2048);
  CHECK(f50->forward(digits.images).sizes().vec() == std::vector<int64_t>{3, 2048});
}

TEST_CASE("resnet inputs that do not fit give a UserError that says how to fix it") {
  auto m = make_resnet("resnet18", opts(1, 10));
  CHECK(m->min_input_size() == 16);
  CHECK(m->forward(test::mnist_batch(2).images).sizes().vec() ==
        std::vector<int64_t>{2, 10});  // MNIST's 28x28
  CHECK(user_error([&] { m->forward(test::mnist_batch(2).images.slice(2, 0, 12)); }) ==
        "resnet18 needs inputs of at least 16x16, got 12x28: resize, e.g. [[data.train_transforms]] "
        "name = \"resize\" size = [16, 28]");
  std::string err = user_error([&] { m->forward(test::mnist_batch(2, 64, 3).images); });
  CHECK(err.find("in_chans = 1") != std::string::npos);
  CHECK(err.find("[2, 3, 64, 64]") != std::string::npos);
}

TEST_CASE("resnet channels_last on and off: same outputs, gradients and running statistics") {
  auto digits = test::mnist_batch(8, 64);
  auto cl = seeded_resnet(2, opts(1, 10, true));
  auto nchw = seeded_resnet(2, opts(1, 10, false));
  CHECK(cl->named_parameters()["layer1.0.conv1.weight"].is_contiguous(torch::MemoryFormat::ChannelsLast));
  CHECK(nchw->named_parameters()["layer1.0.conv1.weight"].is_contiguous());
  // Training mode: batch statistics, running-statistics updates and the backward pass all compared.
  torch::Tensor ya = cl->forward(digits.images), yb = nchw->forward(digits.images);
  CHECK(max_diff(ya, yb) < 1e-4 * (1 + yb.abs().max().item<double>()));
  torch::nn::functional::cross_entropy(ya, digits.labels).backward();
  torch::nn::functional::cross_entropy(yb, digits.labels).backward();
  for (const char* k : {"conv1.weight", "layer2.0.downsample.0.weight", "layer4.1.bn2.weight", "fc.weight"}) {
    CAPTURE(k);
    auto ga = cl->named_parameters()[k].grad(), gb = nchw->named_parameters()[k].grad();
    CHECK(max_diff(ga, gb) < 1e-4 * (1 + gb.abs().max().item<double>()));
  }
  auto ba = cl->named_buffers(), bb = nchw->named_buffers();
  CHECK(max_diff(ba["layer3.0.bn1.running_var"], bb["layer3.0.bn1.running_var"]) < 1e-4);
  CHECK(ba["bn1.num_batches_tracked"].item<int64_t>() == 1);
}

TEST_CASE("resnet trains under bf16 CPU autocast: bf16 logits, fp32 BN statistics, finite gradients") {
  auto digits = test::mnist_batch(16, 64);
  auto ref = seeded_resnet(3, opts(1, 10));
  auto low = seeded_resnet(3, opts(1, 10));
  torch::Tensor loss_ref = torch::nn::functional::cross_entropy(ref->forward(digits.images), digits.labels);
  torch::Tensor logits, loss;
  {
    test::AutocastCpu autocast(torch::kBFloat16);
    logits = low->forward(digits.images);
    loss = torch::nn::functional::cross_entropy(logits, digits.labels);
  }
  CHECK((logits.scalar_type() == torch::kBFloat16));  // fc is a linear: autocast runs it in bf16
  loss.backward();
  loss_ref.backward();
  MESSAGE("loss bf16 " << loss.item<double>() << ", fp32 " << loss_ref.item<double>());
  CHECK(loss.item<double>() == doctest::Approx(loss_ref.item<double>()).epsilon(0.03));
  for (const auto& p : low->named_parameters()) {
    CAPTURE(p.key());
    REQUIRE(p.value().grad().defined());
    CHECK((p.value().grad().scalar_type() == torch::kFloat));
    CHECK(torch::isfinite(p.value().grad()).all().item<bool>());
  }
  // The gradients point the same way as in fp32 (bf16 keeps ~3 significant digits). Not a conv
  // inside a residual branch: zero_init_last gives those exactly zero gradients at init. The first
  // layers' gradients come through the whole bf16 backward: measured cosines 0.97-0.99 where oneDNN
  // has AVX-512 bf16 kernels (Intel Xeon), 0.946 (layer2 downsample) and 0.955 (conv1) on an AVX2
  // AMD EPYC (LibTorch's fallback kernels). A wrong gradient (sign, layer, missing term) is far below.
  for (std::string k : {"conv1.weight", "layer2.0.downsample.0.weight", "layer3.1.bn2.weight", "fc.weight"}) {
    CAPTURE(k);
    auto a = low->named_parameters()[k].grad().flatten(), b = ref->named_parameters()[k].grad().flatten();
    const double cos = torch::cosine_similarity(a, b, 0).item<double>();
    MESSAGE(k << ": cosine(bf16 grad, fp32 grad) = " << cos);
    CHECK(cos > 0.9);
  }
  // BatchNorm statistics stay fp32 and are really updated under autocast (not a bf16 copy).
  auto rl = low->named_buffers(), rr = ref->named_buffers();
  for (std::string k :
       {"bn1.running_mean", "layer2.1.bn1.running_var", "layer4.0.downsample.1.running_mean"}) {
    CAPTURE(k);
    CHECK((rl[k].scalar_type() == torch::kFloat));
    const bool var = k.find("running_var") != std::string::npos;  // init: mean 0, var 1
    CHECK(!torch::equal(rl[k], var ? torch::ones_like(rl[k]) : torch::zeros_like(rl[k])));
    CHECK(max_diff(rl[k], rr[k]) < 0.02 * (1 + rr[k].abs().max().item<double>()));
  }
  // Evaluation under autocast stays close to fp32.
  low->eval();
  ref->eval();
  torch::NoGradGuard g;
  torch::Tensor e_ref = ref->forward(digits.images), e_low;
  {
    test::AutocastCpu autocast(torch::kBFloat16);
    e_low = low->forward(digits.images);
  }
  CHECK(max_diff(e_low, e_ref) < 0.05 * e_ref.abs().max().item<double>() + 1e-3);
}

TEST_CASE("resnet drop_path and dropout act only in training") {
  auto digits = test::mnist_batch(8, 32);
  ResNetOptions o = opts(1, 10);
  o.drop_path_rate = 0.5;
  auto m = seeded_resnet(4, o);
  {
    // zero_init_last makes every residual branch 0 at init, which no drop can change: undo it.
    torch::NoGradGuard g;
    for (auto& p : m->named_parameters())
      if (p.key().find("bn2.weight") != std::string::npos) p.value().fill_(1.0);
  }
  torch::NoGradGuard g;
  m->eval();
  CHECK(torch::equal(m->forward(digits.images), m->forward(digits.images)));
  m->train();
  torch::manual_seed(5);
  torch::Tensor a = m->forward(digits.images);
  torch::manual_seed(6);
  CHECK(!torch::equal(a, m->forward(digits.images)));
  torch::manual_seed(5);
  CHECK(torch::equal(a, m->forward(digits.images)));  // the randomness is the drops, nothing else

  o.drop_path_rate = 0.0;
  o.drop_rate = 0.5;
  auto d = seeded_resnet(4, o);
  d->train();
  CHECK(!torch::equal(d->forward(digits.images), d->forward(digits.images)));
  d->eval();
  CHECK(torch::equal(d->forward(digits.images), d->forward(digits.images)));
}

TEST_CASE("resnet stages() cover every parameter and buffer exactly once, input to output") {
  auto m = make_resnet("resnet34", opts(1, 10));
  auto st = m->stages();
  std::vector<std::string> names;
  for (const auto& s : st) names.push_back(s.name);
  CHECK(names == std::vector<std::string>{"stem", "layer1", "layer2", "layer3", "layer4", "head"});
  CHECK(m->first_conv() == "conv1");
  CHECK(m->classifier() == "fc");
  int last = 0;
  for (const auto& kv : model_tensors(*m)) {  // state_dict order runs input to output
    CAPTURE(kv.first);
    int holders = 0;
    for (const auto& s : st) holders += s.contains(kv.first);
    CHECK(holders == 1);
    int s = stage_of(st, kv.first);
    CHECK(s >= last);
    last = std::max(last, s);
  }
  CHECK(last == 5);
  CHECK(stage_of(st, "fc.weight") == 5);
  CHECK(stage_of(st, "bn1.running_mean") == 0);
}

TEST_CASE("resnet18/34/50 are registered and build from a recipe table") {
  ModelRegistry registry("model");
  register_models(registry);
  for (const auto& a : resnet_archs()) CHECK(registry.find(a.name) != nullptr);
  std::vector<std::string> keys;
  for (const auto& d : registry.describe("resnet50")) keys.push_back(d.key);
  CHECK(keys == std::vector<std::string>{"in_chans", "num_classes", "drop_path_rate", "drop_rate",
                                         "pretrained", "channels_last"});

  auto dir = test::temp_dir("resnet_recipe");
  std::string file = dir + "/r.toml";
  auto good = test::parse_model_table(registry, file,
                                      "[model]\nname = \"resnet18\"\nin_chans = 1\nnum_classes = 10\n");
  CHECK(good.errors.empty());
  REQUIRE(good.factory);
  auto m = good.factory();
  CHECK(m->name() == "resnet18");
  CHECK(m->num_classes() == 10);
  CHECK(m->in_chans() == 1);
  CHECK(count_params(*m) == 11175370);

  auto bad = test::parse_model_table(
      registry, file,
      "[model]\nname = \"resnet34\"\npretrained = \"missing.safetensors\"\ndrop_path_rate = 1\n");
  CHECK(bad.errors.size() == 2);  // both problems at once, before building anything
  CHECK(user_error([] { make_resnet("resnet19", opts(3, 1000)); }) ==
        "unknown ResNet \"resnet19\" (known: resnet18, resnet34, resnet50)");
}

TEST_CASE("resnet evaluation with its BatchNorms folded into the convolutions matches the separate layers") {
  for (const std::string name : {"resnet18", "resnet50"}) {
    for (int64_t size : {28, 64}) {  // 28: every convolution on the packed kernels; 64: the early ones in oneDNN
      CAPTURE(name);
      CAPTURE(size);
      auto model = seeded_resnet(4, opts(1, 10, true), name);
      const auto digits = test::mnist_batch(6, size);
      {
        // Statistics and affine parameters a trained network has (zero_init_last's zeros replaced).
        torch::NoGradGuard no_grad;
        for (auto& p : model->named_parameters()) {
          const std::string& k = p.key();
          if (k.find("bn") != std::string::npos || k.find("downsample.1") != std::string::npos)
            p.value().copy_(k.find("weight") != std::string::npos ? torch::rand_like(p.value()) + 0.5
                                                                 : 0.1 * torch::randn_like(p.value()));
        }
        for (auto& b : model->named_buffers()) {
          if (b.key().find("running_mean") != std::string::npos) b.value().copy_(0.2 * torch::randn_like(b.value()));
          if (b.key().find("running_var") != std::string::npos) b.value().copy_(torch::rand_like(b.value()) + 0.5);
        }
      }
      model->eval();
      torch::NoGradGuard no_grad;
      const torch::Tensor separate = model->forward(digits.images);  // no FrozenWeights scope: BN as its own layer
      torch::Tensor folded;
      {
        FrozenWeights pass;
        folded = model->forward(digits.images);
        CHECK(torch::equal(model->forward(digits.images), folded));  // the folded weights kept for the pass
      }
      CHECK_MESSAGE(test::rel_diff(folded, separate) < 1e-5, test::rel_diff(folded, separate));
      CHECK(!torch::equal(folded, separate));  // folded: other rounding (else the fold did not run)
      CHECK(torch::equal(folded.argmax(1), separate.argmax(1)));
      // A BatchNorm changed between passes: the next pass folds it anew.
      model->named_buffers()["layer4.0.bn2.running_var"].mul_(4.0);
      const torch::Tensor separate2 = model->forward(digits.images);
      FrozenWeights pass;
      const torch::Tensor folded2 = model->forward(digits.images);
      CHECK(test::rel_diff(folded2, separate2) < 1e-5);
      CHECK(test::rel_diff(folded2, folded) > 1e-3);
    }
  }
}
