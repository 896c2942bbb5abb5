#!/usr/bin/env bash
# Runs every test (unit, CLI, recipe regression) after setting up what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
# Test-only: headless Chromium renders `engine report` pages (tests/engine/report).
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends chromium
fi
# setup.sh builds only the engine binary; the tests, examples and everything else are built here.
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# The recipe reader's and the safetensors reader's tests again under ASan + UBSan (g++, own build
# dir build-asan/; measured 1 min 50 s from scratch on 2 cores, no ccache). The whole sanitized
# subset and the fuzzers take longer: tools/fuzz.sh (README, "Sanitizers and fuzzing").
if [ $# -eq 0 ]; then
  CXX=g++ BUILD_DIR=build-asan JOBS="$(nproc)" tools/fuzz.sh --asan-tests test_base test_io
fi
