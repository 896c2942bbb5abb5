#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for engine: apt packages, the engine binary, real MNIST data.
# Idempotent and fast when already done. Usage: tools/setup.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}

PACKAGES=(cmake g++ ninja-build ccache pkg-config
          libtorch-dev libgloo-dev libopenblas0-pthread
          libtomlplusplus-dev libfmt-dev nlohmann-json3-dev libcli11-dev doctest-dev zlib1g-dev
          libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev nodejs npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from elsewhere (nvm, a distro build): only the commands matter.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# LibTorch runs its matmuls through the system BLAS: the reference BLAS is ~30x slower than OpenBLAS.
blas=$(update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | awk '/^Value:/{print $2}')
case "$blas" in *openblas*) ;; *) echo "setup: warning: libblas.so.3 is '$blas', not OpenBLAS: training will be slow" ;; esac

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
# Only what `engine run` needs: the engine binary and its libraries, not the test executables and
# examples (tools/test.sh builds those). A fresh machine trains sooner: see bench/RESULTS.md.
cmake --build "$BUILD" --target engine -j"$(nproc)"

datasets/fetch_mnist.sh
# The same digits as PNG files named by label (data/digits_png/images), for the image-file datasets.
datasets/make_digit_pngs.sh
