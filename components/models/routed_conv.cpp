#include "components/models/routed_conv.h"

#include <torch/torch.h>

#include <atomic>

#include "components/models/im2col_conv.h"
#include "components/models/simd.h"

namespace engine {
namespace {

std::atomic<bool> patch_convs_to_gemm{false};

bool cpu_floating(const torch::Tensor& t) { return !t.defined() || (t.device().is_cpu() && t.is_floating_point()); }

}  // namespace

bool patch_conv(const torch::Tensor& weight, at::IntArrayRef stride) {
  if (weight.dim() != 4 || stride.empty() || stride.size() > 2) return false;
  for (int d = 0; d < 2; ++d) {
    const int64_t s = stride[stride.size() == 1 ? 0 : d];
    if (s < 2 || s < weight.size(2 + d)) return false;
  }
  return true;
}

void route_patch_convs(bool on) { patch_convs_to_gemm.store(on); }
bool patch_convs_routed() { return patch_convs_to_gemm.load(); }

torch::Tensor routed_conv2d(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                     at::IntArrayRef stride, at::IntArrayRef padding) {
  if (!patch_convs_routed() || !patch_conv(weight, stride) || !cpu_floating(x) || !cpu_floating(weight) ||
      !cpu_floating(bias) || x.scalar_type() == torch::kDouble)
    return torch::conv2d(x, weight, bias, stride, padding);
  const auto dtype = simd::autocast_cpu() ? simd::autocast_cpu_dtype() : x.scalar_type();
  simd::AutocastOffCpu float32;
  auto f = [](const torch::Tensor& t) { return t.defined() ? t.to(torch::kFloat) : t; };
  return im2col_conv2d(f(x), f(weight), f(bias), stride, padding).to(dtype);
}

}  // namespace engine
