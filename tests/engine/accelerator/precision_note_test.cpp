// The note a run prints about its precision: bf16 on a CPU without AVX-512 has no native bf16
// kernels (LibTorch's fallbacks are ~8x slower than fp32); the engine emulates them
// (bf16_emulation.h), and the user is told so before any compute.
#include <doctest/doctest.h>

#include "engine/accelerator/accelerator.h"
#include "engine/accelerator/world.h"

using namespace engine;

namespace {
std::string note_for(const std::string& precision) {
  AcceleratorOptions o;
  o.mixed_precision = precision;
  o.device = "cpu";
  o.threads = 1;
  return Accelerator::create(o, WorldInfo{})->precision_note();
}
}  // namespace

TEST_CASE(
    "bf16 on a CPU without AVX-512 gets a note that says how bf16 runs there, fp32 and AVX-512 CPUs get none") {
  CHECK(note_for("no").empty());
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx512 = __builtin_cpu_supports("avx512bw");
  MESSAGE("this CPU has AVX-512 (avx512bw): " << avx512);
  const std::string note = note_for("bf16");
  CHECK(note.empty() == avx512);
  if (!avx512) {
    CHECK(note.find("without AVX-512") != std::string::npos);
    // Emulated (LibTorch 1.x): fp32 kernels on bf16-rounded operands; else the slow-kernel advice.
    CHECK((note.find("fp32 kernels on bf16-rounded operands") != std::string::npos ||
           note.find("mixed_precision = \"no\" trains faster") != std::string::npos));
  }
#endif
}
