#include "engine/accelerator/bf16_emulation.h"

#include <ATen/ATen.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "components/models/im2col_conv.h"
#include "engine/accelerator/onednn_convs.h"
#include "engine/core/env.h"

namespace engine {
namespace {

// ENGINE_BF16_EMULATION is not "0", and LibTorch has no fast bf16 kernels here: the oneDNN check
// turned oneDNN off (onednn_convs.h), or LibTorch 1.x on a CPU without avx512bw. (LibTorch 2.x with
// oneDNN on: its own CPU bf16 paths, not measured without AVX-512.)
bool bf16_emulation_applies() {
  if (switched_off("ENGINE_BF16_EMULATION")) return false;
  if (check_onednn_convs().turned_off) return true;
#if TORCH_VERSION_MAJOR < 2 && defined(__x86_64__) && defined(__GNUC__)
  return !__builtin_cpu_supports("avx512bw");
#else
  return false;
#endif
}

using at::Tensor;

// An autocast operand as the native bf16 kernel would see it, in fp32: fp32/fp16 rounded to bf16
// and back, bf16 widened (exact); other dtypes (double, integers) left as autocast leaves them.
// Sizes and scalars pass through.
template <class T>
const T& operand(const T& x) {
  return x;
}
Tensor operand(const Tensor& t) {
  if (!t.defined()) return t;
  if (t.scalar_type() == at::kBFloat16) return t.to(at::kFloat);
  if (t.scalar_type() == at::kFloat || t.scalar_type() == at::kHalf) return t.to(at::kBFloat16).to(at::kFloat);
  return t;
}
c10::optional<Tensor> operand(const c10::optional<Tensor>& t) {
  if (!t.has_value()) return t;
  return operand(*t);
}

// `op` below autocast (the guard keeps it from re-entering these kernels) on the operands above,
// its fp32 output rounded to bf16.
template <class Op, class... Args>
Tensor emulate(Op op, const Args&... args) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastCPU);
  Tensor out = op(operand(args)...);
  return out.scalar_type() == at::kFloat ? out.to(at::kBFloat16) : out;
}

Tensor conv1d(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& b, at::IntArrayRef stride,
              at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  return emulate([](const auto&... a) { return at::conv1d(a...); }, x, w, b, stride, padding, dilation, groups);
}
// A convolution with a small output runs as GEMMs there, as it does in float32 (im2col_conv.h).
Tensor conv2d(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& b, at::IntArrayRef stride,
              at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
  const bool plain = groups == 1 && std::all_of(dilation.begin(), dilation.end(), [](int64_t d) { return d == 1; });
  return emulate(
      [plain](const Tensor& x, const Tensor& w, const c10::optional<Tensor>& b, at::IntArrayRef stride,
              at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups) {
        if (plain) return conv2d_small_output(x, w, b.value_or(Tensor()), stride, padding);
        return at::conv2d(x, w, b, stride, padding, dilation, groups);
      },
      x, w, b, stride, padding, dilation, groups);
}
Tensor linear(const Tensor& x, const Tensor& w, const c10::optional<Tensor>& b) {
  return emulate([](const auto&... a) { return at::linear(a...); }, x, w, b);
}
Tensor mm(const Tensor& a, const Tensor& b) {
  return emulate([](const auto&... t) { return at::mm(t...); }, a, b);
}
Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, const at::Scalar& beta, const at::Scalar& alpha) {
  return emulate([](const auto&... t) { return at::addmm(t...); }, c, a, b, beta, alpha);
}
Tensor bmm(const Tensor& a, const Tensor& b) {
  return emulate([](const auto&... t) { return at::bmm(t...); }, a, b);
}
Tensor baddbmm(const Tensor& c, const Tensor& a, const Tensor& b, const at::Scalar& beta, const at::Scalar& alpha) {
  return emulate([](const auto&... t) { return at::baddbmm(t...); }, c, a, b, beta, alpha);
}
Tensor matmul(const Tensor& a, const Tensor& b) {
  return emulate([](const auto&... t) { return at::matmul(t...); }, a, b);
}

// The dispatcher warns once per kernel that replaces a registered one: expected here, not news.
struct Quiet : c10::WarningHandler {
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning&) override {}
};
using WarningHandlerGuard = c10::WarningUtils::WarningHandlerGuard;
#else
  void process(const c10::SourceLocation&, const std::string&, const bool) override {}
};
using WarningHandlerGuard = c10::Warning::WarningHandlerGuard;
#endif

std::unique_ptr<torch::Library> install() {
  Quiet quiet;
  WarningHandlerGuard quiet_while_installing(&quiet);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::AutocastCPU, __FILE__,
                                              __LINE__);
  lib->impl("conv1d", TORCH_FN(conv1d));
  lib->impl("conv2d", TORCH_FN(conv2d));
  lib->impl("linear", TORCH_FN(linear));
  lib->impl("mm", TORCH_FN(mm));
  lib->impl("addmm", TORCH_FN(addmm));
  lib->impl("bmm", TORCH_FN(bmm));
  lib->impl("baddbmm", TORCH_FN(baddbmm));
  lib->impl("matmul", TORCH_FN(matmul));
  return lib;
}

}  // namespace

bool install_bf16_emulation() {
  static const bool active = [] {
    if (!bf16_emulation_applies()) return false;
    static std::unique_ptr<torch::Library> lib = install();  // lives as long as the process
    return true;
  }();
  return active;
}

}  // namespace engine
