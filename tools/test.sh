#!/usr/bin/env bash
# Runs every test (unit, CLI, recipe regression) after setting up what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
