// Test executables that train or build models check LibTorch's oneDNN convolutions as every engine
// process does (Accelerator::create, engine/accelerator/onednn_convs.h), before any test case runs:
// a test that compares a convolution with torch::conv2d then compares it with what the engine
// itself would run. tests/CMakeLists.txt adds this file to those executables (it needs LibTorch,
// which test_main, shared with test_base, does not link).
#include "engine/accelerator/onednn_convs.h"

namespace {
const bool onednn_checked = (engine::check_onednn_convs(), true);
}  // namespace
