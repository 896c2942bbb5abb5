// load_pretrained (components/models/pretrained.h) against timm's load_pretrained semantics:
// first-conv adaptation (adapt_input_conv), classifier re-initialisation, strict everything else,
// one-line summary for another architecture, corrupt files.
#include "components/models/pretrained.h"

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>

#include "components/models/convnext.h"
#include "components/models/resnet.h"
#include "engine/core/errors.h"
#include "engine/io/weights.h"
#include "tests/components/models/mnist_batch.h"
#include "tests/components/models/model_fixtures.h"
#include "tests/support/paths.h"

using namespace engine;
using test::seeded_resnet;
using test::user_error;

namespace {

ResNetOptions pretrained_opts(int64_t in_chans, int64_t num_classes, const std::string& pretrained = "") {
  ResNetOptions o = test::opts(in_chans, num_classes);
  o.pretrained = pretrained;
  return o;
}

// text contains part; when it does not, the text is shown (the messages checked here are long).
bool has_part(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return true;
  MESSAGE("not found: " << part << "\n  in: " << text);
  return false;
}

// A "pretrained" resnet18 whose every tensor differs from a fresh model's: one training step's
// worth of BatchNorm statistics on real digits, then every parameter moved off its init.
NamedTensors pretrained_resnet18(int64_t in_chans, int64_t num_classes) {
  auto m = seeded_resnet(10, pretrained_opts(in_chans, num_classes));
  m->forward(test::mnist_batch(16, 64, in_chans).images);  // training mode: running stats move
  torch::NoGradGuard g;
  for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 0.01);
  return model_tensors(*m);
}

std::map<std::string, torch::Tensor> by_key(const NamedTensors& t) { return {t.begin(), t.end()}; }

}  // namespace

TEST_CASE("a 3-channel 1000-class checkpoint loads into a 1-channel 10-class resnet as timm does") {
  auto dir = test::temp_dir("pretrained_adapt");
  const std::string file = dir + "/resnet18_in3_1000.safetensors";
  NamedTensors saved = pretrained_resnet18(3, 1000);
  save_safetensors(file, saved);
  auto in_file = by_key(saved);

  auto fresh = seeded_resnet(20, pretrained_opts(1, 10));  // what the recipe's model is before loading
  auto m = seeded_resnet(20, pretrained_opts(1, 10, file));
  CHECK(m->pretrained_note() == "pretrained resnet18 from " + file +
                                    ": conv1.weight adapted 3 -> 1 input channels (sum over RGB, as timm); "
                                    "classifier fc re-initialised "
                                    "(1000 -> 10 classes)");

  auto loaded = by_key(model_tensors(*m));
  auto before = by_key(model_tensors(*fresh));
  REQUIRE(loaded.size() == 122);
  // timm's adapt_input_conv for in_chans = 1: the RGB weights summed, exactly.
  CHECK(torch::equal(loaded["conv1.weight"], in_file["conv1.weight"].sum(1, /*keepdim=*/true)));
  // The classifier is the model's own fresh one, not the file's.
  CHECK(torch::equal(loaded["fc.weight"], before["fc.weight"]));
  CHECK(torch::equal(loaded["fc.bias"], before["fc.bias"]));
  // Every other tensor, BatchNorm statistics and counters included, is the file's, bit for bit,
  // and none of them was already equal before loading.
  size_t body = 0;
  for (const auto& [name, t] : loaded) {
    const std::string& k = name;  // CAPTURE is a lambda: clang (C++17) cannot capture a structured binding
    if (k == "conv1.weight" || k.rfind("fc.", 0) == 0) continue;
    CAPTURE(k);
    CHECK(torch::equal(t, in_file.at(k)));
    if (k.find("num_batches_tracked") == std::string::npos) CHECK(!torch::equal(before.at(k), in_file.at(k)));
    ++body;
  }
  CHECK(body == 119);
  CHECK(loaded["bn1.num_batches_tracked"].item<int64_t>() == 1);
  // The adapted model works on the grey digits it was adapted for.
  m->eval();
  torch::NoGradGuard g;
  CHECK(m->forward(test::mnist_batch(4, 64).images).sizes().vec() == std::vector<int64_t>{4, 10});
}

TEST_CASE("other input channel counts: timm's repeat-and-scale rule, a bf16 file is summed in fp32") {
  auto dir = test::temp_dir("pretrained_chans");
  const std::string file = dir + "/rgb.safetensors";
  NamedTensors saved = pretrained_resnet18(3, 1000);
  save_safetensors(file, saved);
  torch::Tensor w = by_key(saved)["conv1.weight"];

  auto five = seeded_resnet(0, pretrained_opts(5, 1000));
  CHECK(load_pretrained(*five, file) == "pretrained resnet18 from " + file +
                                            ": conv1.weight adapted 3 -> 5 input channels (RGB repeated and "
                                            "scaled by 3/5, as timm)");
  torch::Tensor want = torch::cat({w, w}, 1).slice(1, 0, 5) * (3.0 / 5.0);
  CHECK(torch::equal(by_key(model_tensors(*five))["conv1.weight"], want));

  auto two = seeded_resnet(0, pretrained_opts(2, 1000));
  load_pretrained(*two, file);
  CHECK(torch::equal(by_key(model_tensors(*two))["conv1.weight"], w.slice(1, 0, 2) * 1.5));

  // Same configuration: nothing adapted, an empty note, every tensor the file's.
  auto same = seeded_resnet(0, pretrained_opts(3, 1000));
  CHECK(load_pretrained(*same, file).empty());
  CHECK(same->pretrained_note().empty());
  auto got = model_tensors(*same);
  for (size_t i = 0; i < got.size(); ++i) CHECK(torch::equal(got[i].second, saved[i].second));

  // timm sums a half-precision weight in fp32, then casts back to the file's dtype.
  NamedTensors low;
  for (const auto& [k, t] : saved) low.emplace_back(k, t.is_floating_point() ? t.to(torch::kBFloat16) : t);
  const std::string bf16 = dir + "/bf16.safetensors";
  save_safetensors(bf16, low);
  auto grey = seeded_resnet(0, pretrained_opts(1, 1000));
  load_pretrained(*grey, bf16);
  torch::Tensor wb =
      w.to(torch::kBFloat16).to(torch::kFloat).sum(1, true).to(torch::kBFloat16).to(torch::kFloat);
  CHECK(torch::equal(by_key(model_tensors(*grey))["conv1.weight"], wb));
}

TEST_CASE("classifier: dropped for num_classes = 0, freshly initialised when the file has none") {
  auto dir = test::temp_dir("pretrained_head");
  const std::string full = dir + "/full.safetensors", features = dir + "/features.safetensors";
  NamedTensors saved = pretrained_resnet18(3, 1000);
  save_safetensors(full, saved);
  NamedTensors body;
  for (const auto& kv : saved)
    if (kv.first.rfind("fc.", 0) != 0) body.push_back(kv);
  save_safetensors(features, body);

  auto pooled = seeded_resnet(0, pretrained_opts(3, 0));
  CHECK(load_pretrained(*pooled, full) ==
        "pretrained resnet18 from " + full +
            ": classifier fc dropped (1000 classes in the file, num_classes = 0: "
            "pooled features)");
  auto ten = seeded_resnet(0, pretrained_opts(3, 10));
  auto fc_before = ten->named_parameters()["fc.weight"].clone();
  CHECK(load_pretrained(*ten, features) ==
        "pretrained resnet18 from " + features + ": classifier fc initialised (the file has none)");
  CHECK(torch::equal(ten->named_parameters()["fc.weight"], fc_before));
  CHECK(
      torch::equal(ten->named_parameters()["layer4.1.conv2.weight"], by_key(saved)["layer4.1.conv2.weight"]));
}

TEST_CASE("files without num_batches_tracked load, as PyTorch's BatchNorm allows") {
  auto dir = test::temp_dir("pretrained_nbt");
  const std::string file = dir + "/no_counters.safetensors";
  NamedTensors saved = pretrained_resnet18(3, 1000), kept;
  for (const auto& kv : saved)
    if (kv.first.find("num_batches_tracked") == std::string::npos) kept.push_back(kv);
  REQUIRE(kept.size() == 102);
  save_safetensors(file, kept);
  auto m = seeded_resnet(0, pretrained_opts(3, 1000));
  CHECK(load_pretrained(*m, file).empty());
  auto b = m->named_buffers();
  CHECK(torch::equal(b["layer2.0.bn1.running_mean"], by_key(saved)["layer2.0.bn1.running_mean"]));
  CHECK(b["layer2.0.bn1.num_batches_tracked"].item<int64_t>() == 0);
}

TEST_CASE("anything else is strict: every problem listed at once in one UserError") {
  auto dir = test::temp_dir("pretrained_strict");
  const std::string file = dir + "/edited.safetensors";
  NamedTensors saved = pretrained_resnet18(3, 1000), edited;
  for (auto& [k, t] : saved) {
    if (k == "layer3.1.bn1.running_mean") continue;                                             // missing
    edited.emplace_back(k, k == "layer2.0.conv2.weight" ? t.slice(1, 0, 64).contiguous() : t);  // reshaped
  }
  edited.emplace_back("layer5.0.conv1.weight", torch::zeros({4}));  // unexpected
  save_safetensors(file, edited);
  std::string e = user_error([&] { seeded_resnet(0, pretrained_opts(3, 1000, file)); });
  CHECK(e.find(file + ": weights do not match the model (3 problems):") == 0);
  CHECK(
      has_part(e, "layer2.0.conv2.weight: shape [128, 64, 3, 3] in the file, [128, 128, 3, 3] in the model"));
  CHECK(has_part(e, "layer3.1.bn1.running_mean: missing from the file"));
  CHECK(has_part(e, "layer5.0.conv1.weight: unexpected key (not in the model)"));

  // A first conv timm cannot adapt (2 -> 3 channels) is refused, with the fix, alongside the rest.
  const std::string two = dir + "/two.safetensors";
  save_safetensors(two, pretrained_resnet18(2, 1000));
  e = user_error([&] { seeded_resnet(0, pretrained_opts(3, 1000, two)); });
  CHECK(has_part(e,
                 "conv1.weight: shape [64, 2, 7, 7] in the file, [64, 3, 7, 7] in the model (timm adapts a "
                 "first conv only from 3 (RGB) input channels (to 1 by summing, to N by repeating): set "
                 "[model] in_chans = 2 to use this file as is)"));
}

TEST_CASE("a checkpoint of another architecture gets one clear line, not hundreds") {
  auto dir = test::temp_dir("pretrained_arch");
  const std::string convnext = dir + "/convnext_atto.safetensors";
  {
    torch::manual_seed(0);
    ConvNeXtOptions o;
    save_safetensors(convnext, model_tensors(*make_convnext("convnext_atto", o)));
  }
  std::string e = user_error([&] { seeded_resnet(0, pretrained_opts(1, 10, convnext)); });
  CHECK(e ==
        convnext +
            ": looks like a checkpoint of another architecture than resnet18 (in_chans = 1, num_classes = "
            "10): 122 keys missing, e.g. conv1.weight; 128 unexpected, e.g. stem.0.weight. The file has 128 "
            "tensors, the model 122: check [model] name against the checkpoint");

  const std::string r18 = dir + "/resnet18.safetensors";
  save_safetensors(r18, pretrained_resnet18(3, 1000));
  e = user_error([&] { seeded_resnet(0, pretrained_opts(3, 1000, r18), "resnet34"); });
  CHECK(has_part(e, "another architecture than resnet34"));
  CHECK(has_part(e, "96 keys missing, e.g. layer1.2.conv1.weight"));
  CHECK(e.find('\n') == std::string::npos);
  e = user_error([&] { seeded_resnet(0, pretrained_opts(3, 1000, r18), "resnet50"); });
  CHECK(has_part(e,
                 "of another shape, e.g. layer1.0.conv1.weight [64, 64, 3, 3] in the file, [64, 64, 1, 1] in "
                 "the model"));
}

TEST_CASE("corrupt or missing files are a UserError naming the file") {
  auto dir = test::temp_dir("pretrained_corrupt");
  const std::string file = dir + "/model.safetensors";
  save_safetensors(file, pretrained_resnet18(1, 10));
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = dir + "/truncated.safetensors";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto m = seeded_resnet(0, pretrained_opts(1, 10));
  CHECK(has_part(user_error([&] { load_pretrained(*m, cut); }), cut + ": not a valid safetensors file"));
  const std::string text = dir + "/notes.safetensors";
  std::ofstream(text) << "resnet18 weights, see README\n";
  CHECK(has_part(user_error([&] { load_pretrained(*m, text); }), text + ": not a valid safetensors file"));
  CHECK(user_error([&] { load_pretrained(*m, dir + "/absent.safetensors"); }) ==
        dir + "/absent.safetensors: file not found");
  CHECK(m->pretrained_note().empty());
}
