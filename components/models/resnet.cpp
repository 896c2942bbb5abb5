#include "components/models/resnet.h"

#include <torch/torch.h>

#include "engine/core/env.h"

#include "components/models/all.h"
#include "components/models/backbone_family.h"
#include "components/models/frozen_weights.h"
#include "components/models/im2col_conv.h"
#include "components/models/batch_norm.h"
#include "components/models/layers.h"
#include "components/models/max_pool.h"
#include "components/models/simd.h"

namespace engine {
namespace nn = torch::nn;
// Named, not anonymous: ResNetParts (declared in resnet.h) holds these types, and a unity batch that
// includes this file after another would make GCC warn about an anonymous type in a named struct.
namespace resnet_blocks {

// timm's bias-free k x k convolution with padding k / 2 (a torch Conv2d: same parameters, keys and
// init). Its forward goes through conv2d_small_output: on the small maps of the last stages (small
// images: 2x2 and 1x1 at 28x28) oneDNN's weight gradient is up to 11x slower than GEMMs.
class ConvImpl : public nn::Conv2dImpl {
 public:
  ConvImpl(int64_t in, int64_t out, int64_t kernel, int64_t stride)
      : nn::Conv2dImpl(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false)),
        stride_(stride),
        padding_(kernel / 2) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return conv2d_small_output(x, weight, {}, {stride_, stride_}, {padding_, padding_}, cache_.get());
  }

  /// relu(bn(conv(x)) + residual) (ReLU and residual optional) in an evaluation pass (folds_batch_norm):
  /// one convolution with the BatchNorm folded in, weight * s and bias - running_mean * s per output
  /// channel (s = bn.weight / sqrt(running_var + eps)), made once per FrozenWeights scope; the
  /// residual sum and the ReLU as its output is stored where the packed kernels run. Float rounding
  /// differs from the separate ops' (resnet_test bounds it).
  torch::Tensor forward_folded(const torch::Tensor& x, const SyncBatchNorm2dImpl& bn, bool relu,
                               const torch::Tensor& residual = {}) {
    const uint64_t scope = frozen_weights_scope();
    // Made for these tensors (copies of a module share the cache; swapped weights have other memory).
    const std::vector<const void*> made_from{weight.unsafeGetTensorImpl(), weight.data_ptr(),
                                             bn.weight.data_ptr(),         bn.bias.data_ptr(),
                                             bn.running_mean.data_ptr(),   bn.running_var.data_ptr()};
    if (folded_->scope != scope || folded_->made_from != made_from) {
      torch::NoGradGuard no_grad;
      const torch::Tensor s = bn.weight / (bn.running_var + bn.eps).sqrt();
      // weight's memory format kept (channels-last where the model is): the packed taps read it so.
      folded_->weight = weight.detach() * s.view({-1, 1, 1, 1});
      folded_->bias = bn.bias - bn.running_mean * s;
      folded_->scope = scope;
      folded_->made_from = made_from;
    }
    return conv2d_small_output_act(x, folded_->weight, folded_->bias, {stride_, stride_}, {padding_, padding_},
                                   folded_cache_.get(), residual, relu);
  }

 private:
  int64_t stride_, padding_;
  // The packed weight, kept through an evaluation pass (a FrozenWeights scope). Shared by copies
  // (the cache checks which weight it was made from).
  std::shared_ptr<ConvWeightCache> cache_ = std::make_shared<ConvWeightCache>();
  // forward_folded's weight and bias for one scope and BatchNorm, and their packed form.
  struct Folded {
    uint64_t scope = 0;
    std::vector<const void*> made_from;
    torch::Tensor weight, bias;
  };
  std::shared_ptr<Folded> folded_ = std::make_shared<Folded>();
  std::shared_ptr<ConvWeightCache> folded_cache_ = std::make_shared<ConvWeightCache>();
};
TORCH_MODULE(Conv);

/// True when `m` runs an evaluation pass whose BatchNorms forward_folded may fold into their
/// convolutions: not training, no autograd, inside a FrozenWeights scope (the folded weights are made
/// once per scope), float32 on the CPU outside autocast.
bool folds_batch_norm(const nn::Module& m, const torch::Tensor& x) {
  return !m.is_training() && !torch::GradMode::is_enabled() && frozen_weights_scope() != 0 &&
         simd::cpu_float(x) && !switched_off("ENGINE_FOLD_BN");
}

Conv conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) { return Conv(in, out, kernel, stride); }

// timm's BasicBlock (conv1 3x3 stride s, conv2 3x3) or Bottleneck (conv1 1x1, conv2 3x3 stride s,
// conv3 1x1 to 4x planes), each conv followed by its BatchNorm (bn1..bn3); ReLU between, and after
// the residual sum. `downsample` (1x1 conv + BN on the shortcut) is built by the caller first and
// registered last, as in timm: that is both timm's RNG draw order and its state_dict order.
// Under bf16 autocast BatchNorm needs no fp32 detour (unlike layer_norm): LibTorch 1.13's CPU
// batch_norm takes the bf16 conv output with fp32 weights, computes the statistics in fp32 and
// updates the fp32 running statistics in place (resnet_test checks both).
class ResidualBlockImpl : public nn::Module {
 public:
  ResidualBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, bool bottleneck,
                    nn::Sequential downsample, double drop_path)
      : drop_path_(drop_path) {
    if (bottleneck) {
      add(inplanes, planes, 1, 1);
      add(planes, planes, 3, stride);
      add(planes, planes * 4, 1, 1);
    } else {
      add(inplanes, planes, 3, stride);
      add(planes, planes, 3, 1);
    }
    if (downsample) {
      downsample_ = register_module("downsample", downsample);
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x;
    const size_t last = convs_.size() - 1;
    if (folds_batch_norm(*this, x)) {
      for (size_t i = 0; i < last; ++i) y = convs_[i]->forward_folded(y, *bns_[i], true);
      const torch::Tensor shortcut =
          downsample_ ? downsample_->ptr<ConvImpl>(0)->forward_folded(x, *downsample_->ptr<SyncBatchNorm2dImpl>(1), false)
                      : x;
      return convs_[last]->forward_folded(y, *bns_[last], true, shortcut);
    }
    for (size_t i = 0; i < last; ++i) y = bns_[i]->forward_relu(convs_[i]->forward(y));
    const torch::Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
    if (drop_path_ == 0.0 || !is_training()) return bns_[last]->forward_relu(convs_[last]->forward(y), shortcut);
    y = drop_path(bns_[last]->forward(convs_[last]->forward(y)), drop_path_, true);
    return torch::relu_(y.add_(shortcut));
  }

  /// timm's zero_init_last: the residual branch starts as zero, each block as the identity.
  void zero_init_last() {
    torch::NoGradGuard no_grad;
    bns_.back()->weight.zero_();
  }

 private:
  void add(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
    const std::string n = std::to_string(convs_.size() + 1);
    convs_.push_back(register_module("conv" + n, conv(in, out, kernel, stride)));
    bns_.push_back(register_module("bn" + n, SyncBatchNorm2d(out)));
  }

  double drop_path_;
  std::vector<Conv> convs_;
  std::vector<SyncBatchNorm2d> bns_;
  nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(ResidualBlock);

}  // namespace resnet_blocks
using resnet_blocks::conv;
using resnet_blocks::folds_batch_norm;
using resnet_blocks::Conv;
using resnet_blocks::ResidualBlock;

struct ResNetParts {
  Conv conv1{nullptr};
  SyncBatchNorm2d bn1{nullptr};
  std::vector<std::vector<ResidualBlock>> layers;
  nn::Linear fc{nullptr};
};

const std::vector<ResNetArch>& resnet_archs() {
  static const std::vector<ResNetArch> archs = {
      {"resnet18", false, {2, 2, 2, 2}},
      {"resnet34", false, {3, 4, 6, 3}},
      {"resnet50", true, {3, 4, 6, 3}},
  };
  return archs;
}

ResNet::ResNet(const ResNetArch& arch, const ResNetOptions& options)
    : Model(arch.name), arch_(arch), options_(options), parts_(std::make_unique<ResNetParts>()) {
  // Construction order follows timm's __init__ (stem, then per stage the shortcut before the
  // blocks, then fc), so that the default-init RNG draws, fc's included, happen in timm's order.
  parts_->conv1 = register_module("conv1", conv(options.in_chans, 64, 7, 2));
  parts_->bn1 = register_module("bn1", SyncBatchNorm2d(64));
  const int64_t expansion = arch.bottleneck ? 4 : 1;
  int64_t total = 0;
  for (int64_t n : arch.depths) total += n;
  int64_t inplanes = 64, block = 0;
  for (int i = 0; i < 4; ++i) {
    const int64_t planes = int64_t{64} << i, stride = i == 0 ? 1 : 2;
    auto layer = register_module("layer" + std::to_string(i + 1), nn::Sequential());
    parts_->layers.emplace_back();
    for (int64_t j = 0; j < arch.depths[i]; ++j, ++block) {
      nn::Sequential downsample{nullptr};
      if (j == 0 && (stride != 1 || inplanes != planes * expansion))
        downsample = nn::Sequential(conv(inplanes, planes * expansion, 1, stride),
                                    SyncBatchNorm2d(planes * expansion));
      // timm: drop_path_rate * block / (blocks - 1), rising linearly over the whole network.
      const double dp = total > 1 ? options.drop_path_rate * block / (total - 1) : 0.0;
      ResidualBlock b(inplanes, planes, j == 0 ? stride : 1, arch.bottleneck, downsample, dp);
      layer->push_back(b);
      parts_->layers.back().push_back(b);
      inplanes = planes * expansion;
    }
  }
  if (options.num_classes > 0)
    parts_->fc = register_module("fc", nn::Linear(num_features(), options.num_classes));
  reset_parameters();
  if (options.channels_last) to_channels_last();
}

ResNet::~ResNet() = default;

int64_t ResNet::num_features() const { return 512 * (arch_.bottleneck ? 4 : 1); }

void ResNet::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (const auto& m : named_modules("", /*include_self=*/false)) {  // timm's named_modules order
    if (auto* c = m.value()->as<nn::Conv2d>()) {
      // Drawn into a contiguous tensor: the RNG fills memory in order, so a channels-last weight
      // would get the same numbers in other places than timm's.
      torch::Tensor w = torch::empty(c->weight.sizes(), c->weight.options());
      nn::init::kaiming_normal_(w, 0.0, torch::kFanOut, torch::kReLU);
      c->weight.copy_(w);
    } else if (auto* bn = m.value()->as<SyncBatchNorm2d>()) {
      bn->reset_parameters();  // weight 1, bias 0, running mean 0 / var 1, num_batches_tracked 0
    }
  }
  for (auto& layer : parts_->layers)
    for (auto& b : layer) b->zero_init_last();
}

std::vector<ModelStage> ResNet::stages() const {
  return {{"stem", {"conv1", "bn1"}}, {"layer1", {"layer1"}}, {"layer2", {"layer2"}},
          {"layer3", {"layer3"}},     {"layer4", {"layer4"}}, {"head", {"fc"}}};
}

torch::Tensor ResNet::forward_features(torch::Tensor x) {
  check_input(x);
  if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  // With one input channel, the input and the 7x7 weight are NCHW and channels-last at once, and
  // oneDNN answers with an NCHW map: made channels-last here, the stem's BatchNorm, ReLU and max pool
  // and the first block's shortcut run on the memory the rest of the network uses.
  if (folds_batch_norm(*this, x)) {
    x = parts_->conv1->forward_folded(x, *parts_->bn1, true);
    if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  } else {
    x = parts_->conv1->forward(x);
    if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
    x = parts_->bn1->forward_relu(x);
  }
  x = max_pool2d_nhwc(x, 3, 2, 1);
  for (auto& layer : parts_->layers)
    for (auto& b : layer) x = b->forward(x);
  return x.mean({2, 3});  // timm's SelectAdaptivePool2d('avg', flatten=True)
}

torch::Tensor ResNet::forward(torch::Tensor x) {
  x = forward_features(std::move(x));
  x = engine::dropout(x, options_.drop_rate, is_training());
  return parts_->fc ? parts_->fc->forward(x) : x;  // num_classes = 0: timm's fc is nn.Identity
}

std::unique_ptr<ResNet> make_resnet(const ResNetArch& arch, const ResNetOptions& options) {
  return build_backbone<ResNet>(arch, options);
}

std::unique_ptr<ResNet> make_resnet(const std::string& name, const ResNetOptions& options) {
  return make_resnet(find_arch(resnet_archs(), name, "ResNet"), options);
}

void register_resnet(ModelRegistry& registry) {
  register_backbones<ResNet>(registry, resnet_archs(), "fc", [](const ResNetArch& arch) {
    return "timm " + arch.name + ": " + (arch.bottleneck ? "Bottleneck" : "BasicBlock") + " blocks " +
           c10::str(c10::IntArrayRef(arch.depths)) + ", 7x7 stem, BatchNorm";
  }, {"batch_norm"});
}

}  // namespace engine
