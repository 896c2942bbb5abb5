#!/usr/bin/env bash
# tools/gpu_check.sh [--debs DIR] [--steps N] [--build-dir DIR] [--nproc N]
#
# The CUDA smoke test: on a machine with an NVIDIA GPU and pip torch 2.x, builds `engine` against
# pip torch's LibTorch (CUDA, NCCL) in a separate build dir, then trains the seed's recipe
# (recipes/mnist_convnext_small.toml, convnext_small 49.5M parameters) for a few hundred steps in
# fp16 (autocast + dynamic loss scaling) and in bf16, and prints img/s and loss of each run.
# With --nproc 2 (or more) it also runs `engine launch -n 2` (NCCL) on the fp16 setting.
#
#   --debs DIR      .deb files to unpack (dpkg -x, no root needed) into build-cuda/debs-root for
#                   the build's non-torch dependencies when the GPU machine lacks them. Fetch them
#                   on a Debian 12 machine with network access:
#                     apt-get download libtomlplusplus-dev libtomlplusplus3 libfmt-dev libfmt9 \
#                       nlohmann-json3-dev libcli11-dev doctest-dev libopencv-core-dev \
#                       libopencv-core406 libopencv-imgproc-dev libopencv-imgproc406
#                   OpenCV's own runtime dependencies (tbb, lapack, X11...) come the same way when
#                   the GPU machine lacks them: `ldd build-cuda/engine | grep "not found"` lists
#                   them. Take the .deb files from a release no newer than the GPU machine's
#                   distribution (their glibc/libstdc++ must not be newer than its own).
#   --steps N       optimizer steps per run (default 300)
#   --build-dir D   default build-cuda (never build/: that one is the CPU build)
#   --nproc N       also run N processes with NCCL when N > 1 and N GPUs are visible (default 1)
#
# Exit codes: 0 ok; 1 a build or a run failed; 2 this machine cannot run the check (no NVIDIA GPU,
# no pip torch, CPU-only torch, old-ABI torch, no cmake/nvcc): the message says what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"

DEBS="" STEPS=300 BUILD="build-cuda" NPROC=1
while (($#)); do
  case "$1" in
    --debs) DEBS="$(cd "${2:?--debs needs a directory}" && pwd)"; shift 2 ;;
    --steps) STEPS="${2:?--steps needs a number}"; shift 2 ;;
    --build-dir) BUILD="${2:?--build-dir needs a directory}"; shift 2 ;;
    --nproc) NPROC="${2:?--nproc needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"

cannot() { echo "gpu_check.sh: cannot run here: $*" >&2; exit 2; }
fail() { echo "gpu_check.sh: FAILED: $*" >&2; exit 1; }

# --- 1. The machine: a GPU, pip torch with CUDA, a toolchain --------------------------------------
command -v nvidia-smi >/dev/null || cannot "nvidia-smi not found: this check needs an NVIDIA GPU and its driver"
nvidia-smi -L >/dev/null 2>&1 || cannot "nvidia-smi finds no usable GPU: $(nvidia-smi -L 2>&1 | head -n 1)"
echo "== GPU"; nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader

command -v python3 >/dev/null || cannot "python3 not found (pip torch provides the CUDA LibTorch)"
TORCH_ERR="$(mktemp)"
trap 'rm -f "$TORCH_ERR"' EXIT
TORCH_INFO="$(python3 - 2>"$TORCH_ERR" <<'EOF'
import torch
print(torch.__version__)
print(torch.utils.cmake_prefix_path)
print(torch.version.cuda or "")
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(torch.cuda.device_count())
EOF
)" || cannot "python3 cannot import torch (pip install torch, a CUDA build): $(tail -n 1 "$TORCH_ERR")"
{ read -r TORCH_VERSION; read -r TORCH_PREFIX; read -r TORCH_CUDA; read -r TORCH_ABI; read -r NGPU; } <<< "$TORCH_INFO"
[[ -n "$TORCH_CUDA" ]] || cannot "torch $TORCH_VERSION is a CPU-only build: install a CUDA wheel of torch"
[[ "$TORCH_ABI" == 1 ]] || cannot "torch $TORCH_VERSION uses the pre-C++11 string ABI; the Debian libraries the engine links (fmt, OpenCV) use the C++11 ABI: use a torch wheel built with _GLIBCXX_USE_CXX11_ABI=1 (the default since late 2024)"
((NGPU > 0)) || cannot "torch $TORCH_VERSION (CUDA $TORCH_CUDA) sees no GPU (torch.cuda.device_count() == 0)"
echo "== torch $TORCH_VERSION, CUDA $TORCH_CUDA, $NGPU GPU(s), cmake prefix $TORCH_PREFIX"

command -v cmake >/dev/null || cannot "cmake not found (apt-get install cmake, or pip install cmake)"
# find_package(Torch) of a CUDA LibTorch looks for the CUDA toolkit (nvcc + headers).
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  cannot "nvcc not found: a CUDA LibTorch needs the CUDA toolkit to configure (install it, or put its bin/ on PATH)"
fi
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"

# --- 2. Optional .deb dependencies, unpacked without root -----------------------------------------
PREFIXES="$TORCH_PREFIX"
EXTRA_FLAGS=()
if [[ -n "$DEBS" ]]; then
  ROOT="$BUILD/debs-root"
  shopt -s nullglob
  debs=("$DEBS"/*.deb)
  shopt -u nullglob
  ((${#debs[@]})) || cannot "--debs $DEBS holds no .deb file"
  mkdir -p "$ROOT"
  command -v dpkg >/dev/null || cannot "--debs needs dpkg (dpkg -x)"
  for d in "${debs[@]}"; do dpkg -x "$d" "$ROOT"; done
  echo "== unpacked ${#debs[@]} .deb file(s) into $ROOT"
  MULTIARCH="$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)"
  PREFIXES="$PREFIXES;$ROOT/usr;$ROOT/usr/lib/$MULTIARCH/cmake;$ROOT/usr/share/cmake"
  # Headers outside the CMake configs (OpenCV's find_path, header-only libraries) and libraries
  # found by find_library, both at build time and at run time.
  EXTRA_FLAGS+=("-DCMAKE_INCLUDE_PATH=$ROOT/usr/include" "-DCMAKE_LIBRARY_PATH=$ROOT/usr/lib/$MULTIARCH"
                "-DCMAKE_CXX_FLAGS=-isystem $ROOT/usr/include" "-DCMAKE_BUILD_RPATH=$ROOT/usr/lib/$MULTIARCH")
  export LD_LIBRARY_PATH="$ROOT/usr/lib/$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

# --- 3. Build the engine against pip torch -------------------------------------------------------
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
mkdir -p "$BUILD"
echo "== configuring $BUILD"
# ENGINE_TORCH_FROM_PYTHON / ENGINE_PYTHON: cmake/EngineTorchDeps.cmake asks this python3 where
# the torch and nvidia-nccl wheels are (nccl.h, libnccl, Gloo headers; see its header).
if ! cmake -S . -B "$BUILD" ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$PREFIXES" \
     -DENGINE_TORCH_FROM_PYTHON=ON "-DENGINE_PYTHON=$(command -v python3)" \
     ${EXTRA_FLAGS[@]+"${EXTRA_FLAGS[@]}"} > "$BUILD/configure.log" 2>&1; then
  tail -n 30 "$BUILD/configure.log" >&2
  fail "cmake configure failed (log: $BUILD/configure.log). A missing package (toml++, fmt, CLI11, nlohmann-json, doctest, OpenCV core/imgproc dev) can be given as .deb files with --debs DIR"
fi
grep -E "^-- (NCCL|GLOO) headers|nvToolsExt" "$BUILD/configure.log" || true
echo "== building engine (log: $BUILD/build.log)"
cmake --build "$BUILD" --target engine -j "$(nproc)" > "$BUILD/build.log" 2>&1 ||
  { tail -n 40 "$BUILD/build.log" >&2; fail "build failed (log: $BUILD/build.log)"; }
ENGINE="$BUILD/engine"
# The CUDA path must really be in: the NCCL backend compiles to a stub without USE_C10D_NCCL.
if command -v nm >/dev/null && ! nm -C "$ENGINE" 2>/dev/null | grep -q "NcclCollectives"; then
  echo "gpu_check.sh: warning: $ENGINE has no NCCL backend (USE_C10D_NCCL not defined by this LibTorch)" >&2
fi

# --- 4. Data -------------------------------------------------------------------------------------
if [[ ! -f data/mnist/train.csv ]]; then
  echo "== fetching MNIST"
  datasets/fetch_mnist.sh || fail "no data/mnist/train.csv and datasets/fetch_mnist.sh failed (no network? copy data/mnist/ from a machine that has it)"
fi

# --- 5. Runs -------------------------------------------------------------------------------------
# The last epoch line of metrics.jsonl: the partial epoch max_steps stopped, then evaluated.
report() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
label, path = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(path) if l.strip()]
steps = [l for l in lines if l.get("type") == "step"]
epochs = [l for l in lines if l.get("type") == "epoch"]
if not epochs:
    sys.exit(f"{label}: no epoch line in {path}")
e = epochs[-1]
nan = float("nan")
loss = (f"train/loss {steps[0]['train/loss']:.4f} (step {steps[0]['step']}) -> {steps[-1]['train/loss']:.4f} "
        f"(step {steps[-1]['step']})") if steps else f"train/loss {e.get('train/loss', nan):.4f} (epoch mean)"
print(f"{label:>12}: {e.get('images_per_s', nan):9.1f} img/s   steps {int(e.get('step', 0))}   {loss}   "
      f"valid/loss {e.get('valid/loss', nan):.4f}   valid/accuracy {e.get('valid/accuracy', nan):.4f}")
EOF
}

OUT="$BUILD/gpu-check"
rm -rf "$OUT"
COMMON=(--set "train.max_steps=$STEPS" --set "predict.limit=512"
        --set 'callbacks=[{name="checkpoint_best", monitor="valid/accuracy"}, {name="metrics_logger", every_steps=25}]')
declare -A RESULT
run_one() {  # label, extra engine args...
  local label="$1"; shift
  local dir="$OUT/$label"
  echo "== $label: $*"
  local t0=$SECONDS
  if "$@" "${COMMON[@]}" --set "run.output_dir=$dir" > "$OUT.$label.log" 2>&1; then
    RESULT[$label]="$(report "$label" "$dir/metrics.jsonl") ($((SECONDS - t0)) s wall)"
    echo "${RESULT[$label]}"
  else
    tail -n 30 "$OUT.$label.log" >&2
    fail "$label run failed (log: $OUT.$label.log)"
  fi
}
mkdir -p "$OUT"
for mp in fp16 bf16; do
  run_one "$mp" "$ENGINE" run recipes/mnist_convnext_small.toml --set accelerator.device=cuda \
    --set "accelerator.mixed_precision=$mp"
done
if ((NPROC > 1)); then
  ((NGPU >= NPROC)) || cannot "--nproc $NPROC needs $NPROC GPUs, torch sees $NGPU"
  run_one "fp16_x$NPROC" "$ENGINE" launch -n "$NPROC" recipes/mnist_convnext_small.toml \
    --set accelerator.device=cuda --set accelerator.mixed_precision=fp16
fi

echo "== summary (torch $TORCH_VERSION, CUDA $TORCH_CUDA, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1))"
for k in "${!RESULT[@]}"; do echo "${RESULT[$k]}"; done | sort
