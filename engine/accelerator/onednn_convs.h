#pragma once
// Whether LibTorch's oneDNN convolutions compute what they should on this machine, and turning them
// off where they do not.
//
// LibTorch runs most float and bf16 CPU convolutions through oneDNN (MKLDNN), which JIT-compiles
// kernels whose blocking depends on the CPU and on the cache sizes it reports. Measured: Debian
// trixie's LibTorch 2.6 (oneDNN 3.6) on a 2-core AMD EPYC Zen 5 VM computed a channels-last 1x1
// stride-2 convolution (a ResNet shortcut) 69% off, a 2x2 stride-2 one (ConvNeXt's downsample) 36%
// off, and the input gradient of a 4x4 stride-4 one (a patchify stem) 52% off, silently; LibTorch's
// own convolutions (oneDNN off) were right to 1e-7, and LibTorch 1.13 was right on the same CPU.
// A training run would go on with wrong numbers and no error. So each process checks a handful of
// small convolutions of the shapes the engine's models use, oneDNN's against LibTorch's own, before
// its first step, and turns oneDNN off for the process where any of them disagrees.
#include <string>

namespace engine {

/// What check_onednn_convs() found and did.
struct OnednnConvs {
  bool checked = false;     ///< LibTorch has oneDNN, it was on, and the probes ran
  bool turned_off = false;  ///< a probe disagreed: oneDNN is off for this process
  int probes = 0;           ///< convolutions oneDNN ran, checked (forward, input and weight gradients each)
  std::string wrong;        ///< the first that disagreed and by how much ("" when none)
};

/// Once per process, before the first training or prediction step (Accelerator::create,
/// Learner::load, the test and bench mains): runs the probes when LibTorch has oneDNN and it is on,
/// and turns oneDNN off (at::globalContext().setUserEnabledMkldnn(false)) where one disagrees.
/// ENGINE_ONEDNN_CHECK=0 skips the check and leaves oneDNN as LibTorch set it. 0.1-0.3 s measured
/// (oneDNN JIT-compiles a kernel per shape and direction).
const OnednnConvs& check_onednn_convs();

/// The work of check_onednn_convs(), done on each call (tests): oneDNN's state is left as found
/// unless a probe disagrees.
OnednnConvs probe_onednn_convs();

/// One line for the run header when oneDNN was turned off; "" otherwise.
std::string onednn_convs_note();

}  // namespace engine
