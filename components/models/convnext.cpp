#include "components/models/convnext.h"

#include <torch/torch.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "components/models/all.h"
#include "components/models/backbone_family.h"
#include "components/models/convnext_mlp.h"
#include "components/models/cpu_kernels.h"
#include "components/models/depthwise_conv.h"
#include "components/models/im2col_conv.h"
#include "components/models/layers.h"
#include "components/models/simd.h"
#include "engine/core/cpu_threads.h"
#include "engine/core/env.h"

namespace engine {
namespace nn = torch::nn;
// Named, not anonymous: ConvNeXtParts (declared in convnext.h) holds these types, and a unity batch
// that includes this file after another would make GCC warn about an anonymous type in a named struct.
namespace convnext_blocks {

// timm's Mlp (fc1 Linear on NHWC) or ConvMlp (fc1 1x1 Conv2d on NCHW): keys mlp.fc1 / mlp.fc2.
// Both are the same maths: a matrix product over channels at every pixel. On CPU with an
// optimised BLAS (OpenBLAS) it runs as two GEMMs on the pixels as rows ([N*H*W, C], a free view
// of a channels-last tensor); else as 1x1 convolutions on the NCHW tensor (oneDNN), which beat
// Debian's reference BLAS by far. Measured on 2 cores (bench/RESULTS.md): convnext_atto's eight
// MLPs at 40x40, batch 64, fwd+bwd 80 ms as oneDNN 1x1 convs, 50 ms as OpenBLAS GEMMs; the
// small maps of the last stages (64-256 rows) are where oneDNN is 4-6x slower.
// ENGINE_MLP_GEMM=0 keeps the convolutions (to measure one against the other).
// Under CPU autocast (bf16), only the MLP's two matrix products run in bf16: they are ~85% of a
// ConvNeXt's FLOPs (convnext_atto at 40x40) and the one place bf16 pays, where the CPU has bf16
// dot products (AVX512-BF16: oneDNN's bf16 GEMMs ran 2x OpenBLAS's float32 ones on a Zen 4 core,
// bench/RESULTS.md). The depthwise convolution, the LayerNorms and the stem and downsample
// convolutions stay in float32 in the engine's kernels, a region with autocast off: in bf16 they
// gain no speed (bandwidth-bound or small) and LibTorch 1.13's bf16 versions of them are slow
// (the depthwise weight gradient, layer_norm on short rows). The residual stream stays float32;
// the GELU between the two GEMMs runs on their bf16 output (cpu_kernels.h). CUDA autocast is not
// touched. ENGINE_AUTOCAST_MLP_ONLY=0 lets autocast cast every op it lists (to compare).
class Float32Region {
 public:
  explicit Float32Region(const torch::Tensor& x) {
    if (x.device().is_cpu() && simd::autocast_cpu() && !switched_off("ENGINE_AUTOCAST_MLP_ONLY")) guard_.emplace();
  }

 private:
  std::optional<simd::AutocastOffCpu> guard_;
};

bool mlp_as_gemm(const torch::Tensor& x) {
  return !switched_off("ENGINE_MLP_GEMM") && x.device().is_cpu() && optimized_blas();  // per call: a test switches it
}
class MlpImpl : public nn::Module {
 public:
  MlpImpl(int64_t dim, bool conv) {
    if (conv) {
      fc1_ = register_module("fc1", nn::Conv2d(nn::Conv2dOptions(dim, 4 * dim, 1)))->weight;
      fc2_ = register_module("fc2", nn::Conv2d(nn::Conv2dOptions(4 * dim, dim, 1)))->weight;
    } else {
      fc1_ = register_module("fc1", nn::Linear(dim, 4 * dim))->weight;
      fc2_ = register_module("fc2", nn::Linear(4 * dim, dim))->weight;
    }
    b1_ = named_parameters()["fc1.bias"];
    b2_ = named_parameters()["fc2.bias"];
  }
  /// x + drop_path(gamma * forward(t)) in one autograd function (convnext_mlp.h), or undefined
  /// (nothing drawn) where it does not apply.
  torch::Tensor residual(const torch::Tensor& x, const torch::Tensor& t, const torch::Tensor& gamma, double drop_path,
                         bool training) {
    return convnext_mlp_residual(x, t, fc1_, b1_, fc2_, b2_, gamma, drop_path, training);
  }
  torch::Tensor forward(const torch::Tensor& x) {  // x: NCHW
    // Exact (erf) GELU, as timm (cpu_kernels.h: same maths, faster on CPU).
    if (mlp_as_gemm(x)) {
      auto as_2d = [](const torch::Tensor& w) { return w.view({w.size(0), w.size(1)}); };
      const int64_t n = x.size(0), h = x.size(2), w = x.size(3);
      torch::Tensor rows = x.permute({0, 2, 3, 1}).reshape({n * h * w, x.size(1)});
      torch::Tensor y = torch::addmm(b2_, gelu_exact(torch::addmm(b1_, rows, as_2d(fc1_).t())), as_2d(fc2_).t());
      return y.view({n, h, w, y.size(1)}).permute({0, 3, 1, 2});  // channels-last NCHW
    }
    auto as_1x1 = [](const torch::Tensor& w) {
      return w.dim() == 4 ? w : w.view({w.size(0), w.size(1), 1, 1});
    };
    torch::Tensor h = gelu_exact(torch::conv2d(x, as_1x1(fc1_), b1_));
    return torch::conv2d(h, as_1x1(fc2_), b2_);
  }

 private:
  torch::Tensor fc1_, b1_, fc2_, b2_;
};
TORCH_MODULE(Mlp);

class BlockImpl : public nn::Module {
 public:
  BlockImpl(int64_t dim, bool conv_mlp, double drop_path) : drop_path_(drop_path) {
    // Registration order = timm's state_dict order: own parameter first, then children.
    gamma = register_parameter("gamma", torch::full({dim}, 1e-6));
    conv_dw_ = register_module("conv_dw", nn::Conv2d(nn::Conv2dOptions(dim, dim, 7).padding(3).groups(dim)));
    // LayerNorm2d (conv_mlp) and LayerNorm on NHWC (timm's linear variant) are the same op: LN
    // over channels. Both keyed "norm.weight" / "norm.bias".
    norm_ = register_module("norm", LayerNorm2d(dim));
    mlp_ = register_module("mlp", Mlp(dim, conv_mlp));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor t;
    {
      Float32Region fp32(x);
      // conv_dw's weights, through the engine's kernels for the same convolution (depthwise_conv.h).
      t = norm_->forward(depthwise_conv2d_same(x, conv_dw_->weight, conv_dw_->bias));
    }
    if (mlp_as_gemm(x)) {  // CPU float32: the MLP, layer scale, drop path and residual fused
      torch::Tensor out = mlp_->residual(x, t, gamma, drop_path_, is_training());
      if (out.defined()) return out;
    }
    torch::Tensor y = mlp_->forward(t) * gamma.view({1, -1, 1, 1});  // a bf16 MLP output: float32 again
    return drop_path(y, drop_path_, is_training()) + x;
  }
  torch::Tensor gamma;

 private:
  double drop_path_;
  nn::Conv2d conv_dw_{nullptr};
  LayerNorm2d norm_{nullptr};
  Mlp mlp_{nullptr};
};
TORCH_MODULE(Block);

// The stem (4x4 stride 4) and downsample (2x2 stride 2) convolutions: stride == kernel, so on CPU
// with an optimised BLAS they run as one GEMM on the patch rows (im2col_conv.h), the same maths
// as the convolution. Measured on 2 cores (1 thread, batch 64, 40x40, fwd+bwd, oneDNN conv ->
// GEMM, medians of 3): stem 0.90 -> 0.56 ms (only the weight gradient: the image needs none),
// downsamples 10x10 2.3 -> 1.7, 5x5 2.0 -> 0.9, 2x2 3.1 -> 0.9 ms. Same condition as the MLP
// GEMMs; ENGINE_PATCHIFY_GEMM=0 keeps oneDNN's convolutions (to measure one against the other).
torch::Tensor patchify(nn::Conv2dImpl& conv, const torch::Tensor& x) {
  if (!switched_off("ENGINE_PATCHIFY_GEMM") && mlp_as_gemm(x)) return patchify_conv2d(x, conv.weight, conv.bias);
  return conv.forward(x);
}

class StageImpl : public nn::Module {
 public:
  StageImpl(int64_t in, int64_t out, bool downsample, bool conv_mlp, const std::vector<double>& drop_paths) {
    if (downsample)  // stage 0 has timm's nn.Identity here: no keys
      downsample_ = register_module(
          "downsample", nn::Sequential(LayerNorm2d(in), nn::Conv2d(nn::Conv2dOptions(in, out, 2).stride(2))));
    blocks_ = register_module("blocks", nn::Sequential());
    for (double dp : drop_paths) blocks_->push_back(Block(out, conv_mlp, dp));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (downsample_) {  // downsample_->forward(x), the convolution through patchify()
      Float32Region fp32(x);
      x = patchify(*downsample_->ptr<nn::Conv2dImpl>(1), downsample_->ptr<LayerNorm2dImpl>(0)->forward(x));
    }
    return blocks_->forward(x);
  }

 private:
  nn::Sequential downsample_{nullptr}, blocks_{nullptr};
};
TORCH_MODULE(Stage);

// timm's NormMlpClassifierHead: avg pool -> norm (LayerNorm2d) -> flatten -> drop -> fc.
class HeadImpl : public nn::Module {
 public:
  HeadImpl(int64_t dim, int64_t num_classes, double drop_rate) : drop_rate_(drop_rate) {
    norm_ = register_module("norm", LayerNorm2d(dim));
    if (num_classes > 0) fc_ = register_module("fc", nn::Linear(dim, num_classes));
  }
  torch::Tensor pre_logits(const torch::Tensor& x) {
    return norm_->forward(x.mean({2, 3}, /*keepdim=*/true)).flatten(1);
  }
  torch::Tensor forward(const torch::Tensor& features) {
    torch::Tensor x = engine::dropout(features, drop_rate_, is_training());
    return fc_ ? fc_->forward(x) : x;  // num_classes = 0: timm's fc is nn.Identity
  }

 private:
  double drop_rate_;
  LayerNorm2d norm_{nullptr};
  nn::Linear fc_{nullptr};
};
TORCH_MODULE(Head);

}  // namespace convnext_blocks
using convnext_blocks::BlockImpl;
using convnext_blocks::Float32Region;
using convnext_blocks::Head;
using convnext_blocks::patchify;
using convnext_blocks::Stage;

struct ConvNeXtParts {
  nn::Sequential stem{nullptr};
  std::vector<Stage> stages;
  Head head{nullptr};
};

const std::vector<ConvNeXtArch>& convnext_archs() {
  static const std::vector<ConvNeXtArch> archs = {
      {"convnext_atto", {2, 2, 6, 2}, {40, 80, 160, 320}, true},
      {"convnext_femto", {2, 2, 6, 2}, {48, 96, 192, 384}, true},
      {"convnext_pico", {2, 2, 6, 2}, {64, 128, 256, 512}, true},
      {"convnext_nano", {2, 2, 8, 2}, {80, 160, 320, 640}, true},
      {"convnext_tiny", {3, 3, 9, 3}, {96, 192, 384, 768}, false},
      {"convnext_small", {3, 3, 27, 3}, {96, 192, 384, 768}, false},
  };
  return archs;
}

ConvNeXt::ConvNeXt(const ConvNeXtArch& arch, const ConvNeXtOptions& options)
    : Model(arch.name), arch_(arch), options_(options), parts_(std::make_unique<ConvNeXtParts>()) {
  const auto& d = arch.dims;
  // Construction order follows timm's __init__, so default-init RNG draws happen in the same order.
  parts_->stem = register_module(
      "stem",
      nn::Sequential(nn::Conv2d(nn::Conv2dOptions(options.in_chans, d[0], 4).stride(4)), LayerNorm2d(d[0])));
  int64_t total = 0;
  for (int64_t n : arch.depths) total += n;
  auto stages = register_module("stages", nn::ModuleList());
  int64_t block = 0;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> dp;  // timm: linspace(0, drop_path_rate, sum(depths)) split per stage
    for (int64_t j = 0; j < arch.depths[i]; ++j, ++block)
      dp.push_back(total > 1 ? options.drop_path_rate * block / (total - 1) : 0.0);
    parts_->stages.push_back(Stage(i ? d[i - 1] : d[0], d[i], i > 0, arch.conv_mlp, dp));
    stages->push_back(parts_->stages.back());
  }
  parts_->head = register_module("head", Head(d[3], options.num_classes, options.drop_rate));
  reset_parameters();
  if (options.channels_last) to_channels_last();
}

ConvNeXt::~ConvNeXt() = default;

void ConvNeXt::reset_parameters() {
  // timm's _init_weights, applied module by module in timm's order (leaves in pre-order).
  torch::NoGradGuard no_grad;
  for (const auto& m : named_modules("", /*include_self=*/false)) {
    auto params = m.value()->named_parameters(/*recurse=*/false);
    bool conv_or_linear = m.value()->as<nn::Conv2d>() || m.value()->as<nn::Linear>();
    if (conv_or_linear) {
      trunc_normal_(params["weight"], 0.0, 0.02);
      params["bias"].zero_();
    } else if (auto* ln = m.value()->as<LayerNorm2dImpl>()) {
      ln->reset_parameters();
    } else if (auto* b = m.value()->as<BlockImpl>()) {
      b->gamma.fill_(1e-6);
    }
  }
}

std::vector<ModelStage> ConvNeXt::stages() const {
  std::vector<ModelStage> out{{"stem", {"stem"}}};
  for (int i = 0; i < 4; ++i) out.push_back({"stages." + std::to_string(i), {"stages." + std::to_string(i)}});
  out.push_back({"head", {"head"}});
  return out;
}

torch::Tensor ConvNeXt::forward_features(torch::Tensor x) {
  check_input(x);
  if (options_.channels_last) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  {  // stem->forward(x), the convolution through patchify()
    Float32Region fp32(x);
    x = parts_->stem->ptr<LayerNorm2dImpl>(1)->forward(patchify(*parts_->stem->ptr<nn::Conv2dImpl>(0), x));
  }
  for (auto& s : parts_->stages) x = s->forward(x);
  return parts_->head->pre_logits(x);
}

torch::Tensor ConvNeXt::forward(torch::Tensor x) {
  return parts_->head->forward(forward_features(std::move(x)));
}

std::unique_ptr<ConvNeXt> make_convnext(const ConvNeXtArch& arch, const ConvNeXtOptions& options) {
  return build_backbone<ConvNeXt>(arch, options);
}

std::unique_ptr<ConvNeXt> make_convnext(const std::string& name, const ConvNeXtOptions& options) {
  return make_convnext(find_arch(convnext_archs(), name, "ConvNeXt"), options);
}

void register_convnext(ModelRegistry& registry) {
  register_backbones<ConvNeXt>(registry, convnext_archs(), "head.fc", [](const ConvNeXtArch& arch) {
    return "timm " + arch.name + ": depths " + c10::str(c10::IntArrayRef(arch.depths)) + ", dims " +
           c10::str(c10::IntArrayRef(arch.dims)) + (arch.conv_mlp ? ", conv MLP" : "");
  });
}

}  // namespace engine
