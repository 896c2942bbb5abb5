#!/usr/bin/env bash
# Runs every test (unit, CLI, recipe regression) after setting up what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
# setup.sh builds only the engine binary; the tests, examples and everything else are built here.
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
