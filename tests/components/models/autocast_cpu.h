#pragma once
// CPU autocast for the guard's lifetime, as a run gets it: the Accelerator's AutocastGuard and, for
// bf16, the bf16 emulation the Accelerator installs on CPUs without avx512bw (a no-op where oneDNN's
// bf16 kernels are native). Without it an AVX2 CPU would test LibTorch 1.13's reference bf16 GEMMs,
// which accumulate in bf16 (lowest gradient cosine 0.9986 vs fp32 on an AVX2 AMD EPYC, 0.999984 emulated).
#include <c10/core/ScalarType.h>

#include "engine/accelerator/autocast.h"
#include "engine/accelerator/bf16_emulation.h"

namespace engine::test {

class AutocastCpu {
 public:
  explicit AutocastCpu(c10::ScalarType dtype) : guard_(true, c10::DeviceType::CPU, emulated(dtype)) {}

 private:
  static c10::ScalarType emulated(c10::ScalarType dtype) {
    if (dtype == c10::ScalarType::BFloat16) install_bf16_emulation();
    return dtype;
  }
  AutocastGuard guard_;
};

}  // namespace engine::test
