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
