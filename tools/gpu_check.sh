#!/usr/bin/env bash
# shellcheck disable=SC2317  # the stage functions run through run_stage "$@"
# tools/gpu_check.sh [--bundle DIR] [--steps N] [--batch N] [--build-dir DIR] [--budget S]
#                    [--preflight-only] [--no-seed] [--engine BIN] [--device cuda|cpu]
#
# The one-call GPU check (tools/GPU.md): on a machine with an NVIDIA GPU and pip torch 2.x, in
# stages that each print as they go, take their wall time and append a line to $OUT/summary.md:
#   preflight   every missing tool, header, library and package listed at once, before any build
#   data        data/mnist restored from the bundle (sha256-checked against datasets/mnist.sha256)
#   configure   against python3's torch (ENGINE_TORCH_FROM_PYTHON) and the bundle (tools/gpu_bundle.sh)
#   build       `engine` only, all cores, ccache off
#   ldd         the built engine's libraries resolve on this machine; libtorch_cuda and NCCL are in
#   engine_fp16 / seed_fp16 / engine_bf16 / seed_bf16
#               recipes/mnist_convnext_small.toml (convnext_small, batch 256) for --steps optimizer
#               steps on CUDA, then the seed's own script (tools/gpu_seed_ddp_train.py: timm +
#               Accelerate) on the same data, model, batch and steps: img/s, loss, accuracy
#   nccl        `engine launch -n 2` (NCCL) when 2 GPUs are visible; otherwise what can be checked
# The whole check stops itself after --budget seconds (default 470, under 8 minutes): each stage
# gets at most what is left, later stages are marked skipped. $OUT is the device tool's output
# folder (default BUILD/gpu-check); what comes back from there: summary.md, gpu_check.log (all
# output), build.log, run_fp16.log, run_bf16.log, metrics_fp16.jsonl, metrics_bf16.jsonl, closure.txt.
#
#   --bundle DIR      the folder tools/gpu_bundle.sh made here (default gpu_bundle)
#   --steps N         optimizer steps per run (default 300: 12 epochs of the recipe's 6,400 images)
#   --batch N         per-step batch of both runs (default 256, the seed's and the recipe's)
#   --build-dir D     default build-cuda (never build/: that one is the CPU build)
#   --budget S        seconds for the whole check (default 470)
#   --preflight-only  stop after the preflight
#   --no-seed         leave out the seed script's runs
#   --engine BIN      use this engine binary: no configure/build (e.g. a rerun on the warm machine)
#   --device cpu      a smoke test of this script on a machine without GPU (bf16 only, no seed)
#
# Exit codes: 0 every stage that ran passed; 1 a stage failed; 2 the preflight found something
# missing (the summary lists all of it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
REPO="$(pwd)"

BUNDLE="gpu_bundle" STEPS=300 BATCH=256 BUILD="build-cuda" BUDGET=470 PREFLIGHT_ONLY=0 SEED=1
ENGINE="" DEVICE="cuda"
while (($#)); do
  case "$1" in
    --bundle) BUNDLE="${2:?--bundle needs a folder}"; shift 2 ;;
    --steps) STEPS="${2:?--steps needs a number}"; shift 2 ;;
    --batch) BATCH="${2:?--batch needs a number}"; shift 2 ;;
    --build-dir) BUILD="${2:?--build-dir needs a folder}"; shift 2 ;;
    --budget) BUDGET="${2:?--budget needs seconds}"; shift 2 ;;
    --preflight-only) PREFLIGHT_ONLY=1; shift ;;
    --no-seed) SEED=0; shift ;;
    --engine) ENGINE="${2:?--engine needs a binary}"; shift 2 ;;
    --device) DEVICE="${2:?--device needs cuda or cpu}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || { echo "gpu_check.sh: --device cuda or cpu" >&2; exit 2; }
[[ "$BUILD" = /* ]] || BUILD="$REPO/$BUILD"
[[ "$BUNDLE" = /* ]] || BUNDLE="$REPO/$BUNDLE"
[[ -z "$ENGINE" || "$ENGINE" = /* ]] || ENGINE="$REPO/$ENGINE"
OUT="${OUT:-$BUILD/gpu-check}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.md"
RUNS="$BUILD/gpu-runs"   # run folders (model files): not under $OUT, which comes back whole
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
TEE_PID=$!

T0=$SECONDS
FAILED=0
declare -A R=()   # results: R[engine_fp16.ips], R[seed_fp16.loss], ...
MULTIARCH=x86_64-linux-gnu
PY="$(command -v python3 || true)"

summary() { echo "$*" >> "$SUMMARY"; }
{
  echo "# tools/gpu_check.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), ${HOSTNAME:-?}, budget ${BUDGET} s"
  echo
  echo "Appended after each stage: a check cut short keeps the stages it finished."
  echo
} > "$SUMMARY"

# run_stage NAME CAP FUNCTION [ARGS]: runs FUNCTION with STAGE_LIMIT = min(CAP, what is left of the
# budget); its NOTE goes to the summary. Returns the function's status (124: out of time).
run_stage() {
  local name="$1" cap="$2" left rc t0 status
  shift 2
  left=$((BUDGET - (SECONDS - T0) - 5))
  STAGE_LIMIT=$((cap < left ? cap : left))
  if ((STAGE_LIMIT < 10)); then
    echo "== [$name] skipped: $((SECONDS - T0)) s of the ${BUDGET} s budget used"
    summary "- **$name** skipped: no time left of the ${BUDGET} s budget"
    return 3
  fi
  echo "== [$name] at most ${STAGE_LIMIT} s ($((SECONDS - T0)) s so far)"
  NOTE=""
  t0=$SECONDS
  "$@"; rc=$?
  case $rc in
    0) status=ok ;; 2) status="FAILED (missing pieces)" ;; 3) status=skipped ;;
    124|137) status="TIMED OUT after ${STAGE_LIMIT} s" ;; *) status="FAILED (exit $rc)" ;;
  esac
  echo "== [$name] $status in $((SECONDS - t0)) s${NOTE:+: $NOTE}"
  summary "- **$name** $status ($((SECONDS - t0)) s)${NOTE:+: $NOTE}"
  ((rc == 0 || rc == 3)) || FAILED=1
  return $rc
}

version_ge() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" == "$2" ]]; }  # $1 >= $2

have_lib() {  # soname: found by the loader's cache or in the usual folders
  ldconfig -p 2>/dev/null | grep -F " $1 " >/dev/null && return 0  # not grep -q: pipefail + SIGPIPE
  local d
  for d in /lib/$MULTIARCH /usr/lib/$MULTIARCH /lib64 /usr/lib64 /usr/local/lib; do [[ -e "$d/$1" ]] && return 0; done
  return 1
}

bundle_libdirs() {  # the bundle's library folders, absolute, joined by $1
  local sep="$1" d out=""
  while IFS= read -r d; do [[ -n "$d" ]] && out+="${out:+$sep}$BUNDLE/$d"; done < "$BUNDLE/libdirs.txt"
  echo "$out"
}

# --- preflight --------------------------------------------------------------------------------------
declare -A PYI=()
preflight() {
  local -a missing=() later=() info=()
  local need_build=1 v f
  [[ -n "$ENGINE" ]] && need_build=0
  # The GPU.
  if [[ "$DEVICE" == cuda ]]; then
    if ! command -v nvidia-smi >/dev/null; then
      missing+=("nvidia-smi (no NVIDIA driver: this check needs a GPU machine)")
    elif v="$(timeout -k 5 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1)" && [[ -n "$v" ]]; then
      info+=("GPU: $(echo "$v" | head -n 1) ($(echo "$v" | wc -l) visible)")
    else
      missing+=("a usable GPU (nvidia-smi: $(echo "$v" | head -n 1))")
    fi
  fi
  # python3 and its torch (the LibTorch the engine builds against), nccl.h, the seed's packages.
  if [[ -z "$PY" ]]; then
    missing+=("python3")
  else
    local out
    out="$(timeout -k 5 90 "$PY" - 2>&1 <<'EOF'
import glob, importlib.util, os
def say(k, v): print(f"{k}={v}")
try:
    import torch
    say("torch", torch.__version__)
    say("cuda", torch.version.cuda or "")
    say("abi", int(torch._C._GLIBCXX_USE_CXX11_ABI))
    say("prefix", torch.utils.cmake_prefix_path)
    say("torch_dir", os.path.dirname(torch.__file__))
    say("gpus", torch.cuda.device_count() if torch.version.cuda else 0)
except Exception as e:
    say("torch_error", f"{type(e).__name__}: {e}".replace("\n", " "))
spec = importlib.util.find_spec("nvidia")
dirs = list(spec.submodule_search_locations or []) if spec else []
heads = [h for d in dirs for h in glob.glob(os.path.join(d, "*", "include", "nccl.h"))]
say("nccl_h", heads[0] if heads else "")
for name in ("timm", "accelerate", "pandas", "cv2", "tqdm", "albumentations"):
    say("has_" + name, int(importlib.util.find_spec(name) is not None))
EOF
)"
    while IFS='=' read -r k v; do [[ -n "$k" ]] && PYI[$k]="$v"; done <<< "$(grep -E '^[a-z_]+=' <<< "$out")"
    if [[ -n "${PYI[torch_error]:-}" || -z "${PYI[torch]:-}" ]]; then
      ((need_build)) && missing+=("torch in $PY (${PYI[torch_error]:-no answer: $(echo "$out" | tail -n 1)})")
    else
      info+=("torch ${PYI[torch]} (CUDA ${PYI[cuda]:-none}, ${PYI[gpus]} GPU(s)) at ${PYI[torch_dir]}")
      [[ "$DEVICE" == cuda && -z "${PYI[cuda]}" ]] && missing+=("a CUDA build of torch (${PYI[torch]} is CPU-only)")
      [[ "$DEVICE" == cuda && "${PYI[gpus]:-0}" == 0 ]] && missing+=("a GPU that torch sees (torch.cuda.device_count() == 0)")
      [[ "${PYI[abi]:-}" == 1 ]] || missing+=("a torch built with the C++11 string ABI (the bundle's libraries use it)")
      ((need_build)) && [[ ! -f "${PYI[prefix]:-}/Torch/TorchConfig.cmake" ]] && missing+=("torch's CMake files (${PYI[prefix]}/Torch/TorchConfig.cmake)")
      if [[ -n "${PYI[nccl_h]:-}" ]]; then info+=("nccl.h: ${PYI[nccl_h]}")
      else later+=("nccl.h (the nvidia-nccl wheel's include/): the engine builds without its NCCL backend"); fi
      [[ -d "${PYI[torch_dir]}/include/gloo" ]] || info+=("no Gloo headers in the wheel (CPU multi-process off)")
    fi
    local -a seedmiss=()
    for v in timm accelerate pandas cv2 tqdm; do [[ "${PYI[has_$v]:-0}" == 1 ]] || seedmiss+=("$v"); done
    if ((SEED)) && ((${#seedmiss[@]})); then later+=("python packages for the seed script: ${seedmiss[*]} (seed runs skipped)"); SEED=0; fi
    [[ "${PYI[has_albumentations]:-0}" == 1 ]] || info+=("no albumentations: the seed script uses its OpenCV/NumPy equivalent")
  fi
  # Tools.
  if ((need_build)); then
    if command -v cmake >/dev/null; then
      v="$(cmake --version | head -n 1 | awk '{print $3}')"
      version_ge "$v" 3.18 && info+=("cmake $v") || missing+=("cmake >= 3.18 (found $v)")
    else missing+=("cmake"); fi
    if command -v g++ >/dev/null; then info+=("g++ $(g++ -dumpfullversion)"); else missing+=("g++"); fi
    command -v ninja >/dev/null && info+=("ninja") || later+=("ninja (make is used)")
    if [[ "$DEVICE" == cuda ]]; then
      local nvcc; nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
      if [[ -x "$nvcc" ]]; then
        info+=("nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')")
        [[ -f "$(dirname "$nvcc")/../include/cuda_runtime_api.h" ]] || missing+=("CUDA headers ($(dirname "$nvcc")/../include/cuda_runtime_api.h)")
      else missing+=("nvcc (the CUDA toolkit: torch's CMake config needs it)"); fi
    fi
  fi
  command -v readelf >/dev/null || later+=("readelf (the bundle's closure check of the built engine is skipped)")
  # The bundle: present, its headers, the base libraries it relies on, symbol versions.
  if [[ ! -f "$BUNDLE/libdirs.txt" ]]; then
    ((need_build)) && missing+=("the bundle $BUNDLE (make it with tools/gpu_bundle.sh gpu_bundle; carry: [\"gpu_bundle\"])")
  else
    local root="$BUNDLE/root/usr/include"
    for f in opencv4/opencv2/core.hpp opencv4/opencv2/imgproc.hpp opencv4/opencv2/imgcodecs.hpp toml++/toml.h \
             fmt/format.h nlohmann/json.hpp CLI/CLI.hpp doctest/doctest.h zlib.h; do
      [[ -f "$root/$f" ]] || missing+=("header $f in the bundle")
    done
    if [[ -f "$BUNDLE/closure.txt" ]]; then
      # shellcheck disable=SC2013  # one line of space-separated names
      for v in $(sed -n 's/^base_libraries: //p' "$BUNDLE/closure.txt"); do
        have_lib "$v" || missing+=("base library $v (the bundle relies on the image having it)")
      done
      local glibc cxx have
      glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
      cxx="$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')"
      [[ -n "$cxx" ]] || cxx="$(g++ -print-file-name=libstdc++.so.6 2>/dev/null || true)"
      # shellcheck disable=SC2013
      for v in $(sed -n 's/^max_versions: //p' "$BUNDLE/closure.txt"); do
        case "$v" in
          GLIBC_*) version_ge "$glibc" "${v#GLIBC_}" || missing+=("glibc >= ${v#GLIBC_} (this machine: ${glibc:-unknown})") ;;
          GLIBCXX_*|CXXABI_*)
            have="$(grep -aoE "${v%%_*}_[0-9.]+[0-9]" "$cxx" 2>/dev/null | sort -uV | tail -n 1)"
            version_ge "${have#*_}" "${v#*_}" || missing+=("libstdc++ with $v (this machine's $cxx has ${have:-none})") ;;
        esac
      done
      info+=("bundle: $(du -sh "$BUNDLE" | cut -f1), glibc ${glibc:-?}, $(basename "${cxx:-?}") up to $(grep -aoE 'GLIBCXX_[0-9.]+[0-9]' "$cxx" 2>/dev/null | sort -uV | tail -n 1)")
    else
      missing+=("$BUNDLE/closure.txt (rebuild the bundle with tools/gpu_bundle.sh)")
    fi
  fi
  # Data.
  if [[ ! -f data/mnist/train.csv && ! -f "$BUNDLE/data/mnist/train.csv.gz" ]]; then
    missing+=("data/mnist/train.csv (or $BUNDLE/data/mnist/train.csv.gz: rebuild the bundle)")
  fi
  info+=("$(nproc) cores, $(awk '/MemAvailable/ {printf "%.0f GiB free", $2 / 1048576}' /proc/meminfo), disk $(df -h . | awk 'NR == 2 {print $4}') free")
  printf '   %s\n' "${info[@]}"
  ((${#later[@]})) && printf '   note: %s\n' "${later[@]}"
  if ((${#missing[@]})); then
    printf '   MISSING: %s\n' "${missing[@]}"
    NOTE="MISSING (${#missing[@]}): $(printf '%s; ' "${missing[@]}")"
    return 2
  fi
  NOTE="$(printf '%s; ' "${info[@]}")${later[*]:+notes: $(printf '%s; ' "${later[@]}")}"
}

# --- data ---------------------------------------------------------------------------------------
data() {
  local gz f
  if [[ ! -f data/mnist/train.csv ]]; then
    mkdir -p data/mnist
    for gz in "$BUNDLE"/data/mnist/*.csv.gz; do gzip -dc "$gz" > "data/mnist/$(basename "${gz%.gz}")" || return 1; done
    NOTE="data/mnist restored from the bundle"
  else
    NOTE="data/mnist present"
  fi
  for f in train.csv test.csv; do
    [[ "$(sha256sum "data/mnist/$f" | cut -d' ' -f1)" == "$(awk -v f="$f" '$2 == f {print $1}' datasets/mnist.sha256)" ]] ||
      { NOTE="data/mnist/$f does not match datasets/mnist.sha256"; return 1; }
  done
  if [[ ! -d data/digits_png && -f "$BUNDLE/data/digits_png.tar.gz" ]]; then
    tar -xzf "$BUNDLE/data/digits_png.tar.gz" -C data && NOTE+=", data/digits_png restored"
  fi
  NOTE+=" (sha256 ok: $(($(wc -l < data/mnist/train.csv) - 1)) train rows)"
}

# --- configure + build ------------------------------------------------------------------------------
configure() {
  local nvcc_dir
  nvcc_dir="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
  export PATH="$nvcc_dir:$PATH" CCACHE_DISABLE=1 TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
  local -a gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  mkdir -p "$BUILD"
  # The bundle's root/usr is a prefix (CMake configs, find_path/find_library); its library folders
  # go in the rpath, as DT_RPATH (--disable-new-dtags) so that it also serves the bundle libraries'
  # own dependencies (OpenCV -> TBB, ...), and in -rpath-link for the linker.
  timeout -k 5 "$STAGE_LIMIT" cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DENGINE_TORCH_FROM_PYTHON="$([[ -n "${PYI[torch]:-}" ]] && echo ON || echo OFF)" "-DENGINE_PYTHON=$PY" \
    "-DCMAKE_PREFIX_PATH=$BUNDLE/root/usr" "-DCMAKE_BUILD_RPATH=$(bundle_libdirs ';')" \
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath-link,$(bundle_libdirs ':')" \
    -DCMAKE_POLICY_VERSION_MINIMUM=3.5 > "$OUT/build.log" 2>&1
  local rc=$?
  if ((rc)); then
    grep -E 'CMake Error|error' -A3 "$OUT/build.log" | head -n 30
    NOTE="$(grep -m 3 -E 'CMake Error|Could not|not found' "$OUT/build.log" | tr '\n' ' ')"
    return "$rc"
  fi
  NOTE="$(grep -E '^-- (NCCL|GLOO) headers|nvToolsExt|Found Torch|Caffe2: CUDA detected' "$OUT/build.log" | sed 's/^-- //' | tr '\n' ';' | cut -c1-400)"
}

build() {
  timeout -k 5 "$STAGE_LIMIT" cmake --build "$BUILD" --target engine -j "$(nproc)" >> "$OUT/build.log" 2>&1
  local rc=$?
  if ((rc)); then
    grep -E 'error|Error' "$OUT/build.log" | head -n 25
    NOTE="$(grep -m 5 -E ': error|undefined reference|Error [0-9]' "$OUT/build.log" | cut -c1-300 | tr '\n' ' ')"
    return "$rc"
  fi
  ENGINE="$BUILD/engine"
  NOTE="$(grep -cE '^\[[0-9]+/[0-9]+\]' "$OUT/build.log") build steps on $(nproc) cores"
}

# --- ldd -----------------------------------------------------------------------------------------
RUN_ENV=()
# The ELF that links LibTorch: build/engine is a small launcher of engine-core beside it (engine/entry.cpp).
engine_elf() { local c; c="$(dirname "$ENGINE")/engine-core"; if [[ -f "$c" ]]; then echo "$c"; else echo "$ENGINE"; fi; }
# Whether that ELF has the NCCL backend compiled in (engine/accelerator/nccl_collectives.cpp).
nccl_text() {
  if nm -C "$(engine_elf)" 2>/dev/null | grep NcclCollectives >/dev/null; then echo "the NCCL backend is built in"
  else echo "no NCCL backend in this build"; fi
}
ldd_check() {
  local out missing elf
  elf="$(engine_elf)"
  out="$(ldd "$elf" 2>&1)"
  missing="$(grep 'not found' <<< "$out" | awk '{print $1}' | tr '\n' ' ')"
  if [[ -n "$missing" ]]; then
    # The rpath did not do it: say so, and let the runs use LD_LIBRARY_PATH if that does.
    local ld
    ld="$(bundle_libdirs ':')${PYI[torch_dir]:+:${PYI[torch_dir]}/lib}"
    if LD_LIBRARY_PATH="$ld" ldd "$elf" | grep 'not found' >/dev/null; then
      LD_LIBRARY_PATH="$ld" ldd "$elf" | grep 'not found'
      NOTE="not found: $missing"; return 1
    fi
    RUN_ENV=("LD_LIBRARY_PATH=$ld")
    NOTE="the rpath misses $missing; the runs use LD_LIBRARY_PATH=$ld; "
  fi
  local so at
  for so in libtorch_cuda.so libc10_cuda.so libnccl.so libcudart.so libopencv_core.so libtomlplusplus.so; do
    at="$(awk -v s="$so" 'index($1, s) == 1 {print $1 " -> " $3; exit}' <<< "$out")"
    [[ -n "$at" ]] && NOTE+="$at; "
  done
  if [[ "$DEVICE" == cuda ]] && ! grep -q 'libtorch_cuda\.so' <<< "$out"; then
    NOTE+="engine does not load libtorch_cuda.so (--as-needed dropped it?): no CUDA kernels would be registered"
    return 1
  fi
  if command -v readelf >/dev/null && [[ -f "$BUNDLE/libdirs.txt" ]]; then
    tools/gpu_bundle.sh --check "$BUNDLE" "$elf" | tail -n 3 || NOTE+="readelf closure check failed (see gpu_check.log); "
  fi
  if command -v nm >/dev/null; then NOTE+="$(nccl_text)"; fi
}

# --- runs ----------------------------------------------------------------------------------------
# report_engine LABEL METRICS: steady img/s (epochs after the first), loss, accuracy -> R[LABEL.*]
report_engine() {
  local label="$1" metrics="$2" line
  line="$("$PY" - "$metrics" "$BATCH" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
batch = int(sys.argv[2])
ep = [r for r in rows if r.get("type") == "epoch"]
if not ep:
    sys.exit("no epoch line")
prev, per = 0, []
for e in ep:
    n = (int(e["step"]) - prev) * batch
    prev = int(e["step"])
    per.append((n, n / e["images_per_s"] if e.get("images_per_s") else 0.0))
steady = per[1:] or per
imgs, secs = sum(p[0] for p in steady), sum(p[1] for p in steady)
last = ep[-1]
print(f"{imgs / secs if secs else 0:.1f} {per[0][0] / per[0][1] if per[0][1] else 0:.1f} {last.get('train/loss', float('nan')):.4f} "
      f"{last.get('valid/loss', float('nan')):.4f} {max(e.get('valid/accuracy', 0) for e in ep):.4f} {len(ep)} {prev}")
EOF
)" || return 1
  read -r "R[$label.ips]" "R[$label.ips1]" "R[$label.loss]" "R[$label.vloss]" "R[$label.acc]" "R[$label.epochs]" "R[$label.steps]" <<< "$line"
  local span="epochs 2..${R[$label.epochs]}; epoch 1: ${R[$label.ips1]}"
  ((R[$label.epochs] > 1)) || span="1 epoch only: includes the warm-up"
  NOTE="${R[$label.ips]} img/s ($span), ${R[$label.steps]} steps, train/loss ${R[$label.loss]}, valid/loss ${R[$label.vloss]}, best valid/accuracy ${R[$label.acc]}"
}

engine_run() {  # mixed precision
  local mp="$1" dir="$RUNS/engine_$1"
  rm -rf "$dir"
  echo "engine: $ENGINE run recipes/mnist_convnext_small.toml ($mp, $STEPS steps, batch $BATCH)" | tee -a "$OUT/run_$mp.log"
  env ${RUN_ENV[@]+"${RUN_ENV[@]}"} timeout -k 5 "$STAGE_LIMIT" "$ENGINE" run recipes/mnist_convnext_small.toml \
    --set "accelerator.device=$DEVICE" --set "accelerator.mixed_precision=$mp" --set "data.batch_size=$BATCH" \
    --set "train.max_steps=$STEPS" --set train.epochs=100000 --set checkpoint.every_epochs=0 \
    --set predict.limit=512 --set "run.output_dir=$dir" \
    --set 'callbacks=[{name="checkpoint_best", monitor="valid/accuracy"}, {name="metrics_logger", every_steps=50}]' \
    >> "$OUT/run_$mp.log" 2>&1
  local rc=$?
  [[ -f "$dir/metrics.jsonl" ]] && cp "$dir/metrics.jsonl" "$OUT/metrics_$mp.jsonl"
  if ((rc)); then tail -n 20 "$OUT/run_$mp.log"; NOTE="exit $rc: $(grep -m 2 -iE 'error|what\(\)' "$OUT/run_$mp.log" | cut -c1-300 | tr '\n' ' ')"; return "$rc"; fi
  report_engine "engine_$mp" "$dir/metrics.jsonl"
}

seed_run() {  # mixed precision
  local mp="$1" label="seed_$1" json rc
  if ((!SEED)); then NOTE="left out (--no-seed, --device cpu, or its packages are missing: see preflight)"; return 3; fi
  echo "seed: tools/gpu_seed_ddp_train.py ($mp, $STEPS steps, batch $BATCH)" | tee -a "$OUT/run_$mp.log"
  ACCELERATE_MIXED_PRECISION="$mp" PYTHONUNBUFFERED=1 timeout -k 5 "$STAGE_LIMIT" "$PY" tools/gpu_seed_ddp_train.py \
    --max-steps "$STEPS" --bs "$BATCH" --data data/mnist --output-dir "$RUNS/$label" >> "$OUT/run_$mp.log" 2>&1
  rc=$?
  if ((rc)); then tail -n 20 "$OUT/run_$mp.log"; NOTE="exit $rc: $(grep -m 2 -E 'Error|error' "$OUT/run_$mp.log" | tail -n 1 | cut -c1-300)"; return "$rc"; fi
  json="$(grep -E '^\{"peer": "seed' "$OUT/run_$mp.log" | tail -n 1)"
  read -r "R[$label.ips]" "R[$label.loss]" "R[$label.acc]" "R[$label.ips1]" <<< "$("$PY" -c '
import json, sys
j = json.loads(sys.argv[1])
print("%.1f %.4f %.4f %.1f" % (j["images_per_s"], j["train_loss"], j["valid_accuracy"], j["images_per_s_per_epoch"][0]))' "$json")"
  NOTE="${R[$label.ips]} img/s (epochs 2..; epoch 1: ${R[$label.ips1]}), train/loss ${R[$label.loss]}, best valid/accuracy ${R[$label.acc]}"
  if [[ -n "${R[engine_$mp.ips]:-}" ]]; then
    NOTE+="; engine/seed img/s = $(awk -v a="${R[engine_$mp.ips]}" -v b="${R[$label.ips]}" 'BEGIN {printf "%.2fx", a / b}')"
  fi
}

nccl() {
  local gpus="${PYI[gpus]:-0}"
  if ((gpus < 2)); then
    NOTE="skipped: $gpus GPU (NCCL refuses two ranks on one GPU); $(nccl_text)"
    return 3
  fi
  env ${RUN_ENV[@]+"${RUN_ENV[@]}"} timeout -k 5 "$STAGE_LIMIT" "$ENGINE" launch -n 2 recipes/mnist_convnext_small.toml \
    --set accelerator.device=cuda --set accelerator.mixed_precision=fp16 --set train.max_steps=50 \
    --set train.epochs=100000 --set checkpoint.every_epochs=0 --set predict.limit=512 \
    --set "run.output_dir=$RUNS/nccl_x2" > "$OUT/run_nccl.log" 2>&1 || { tail -n 20 "$OUT/run_nccl.log"; NOTE="launch -n 2 failed"; return 1; }
  report_engine nccl_x2 "$RUNS/nccl_x2/metrics.jsonl"
}

finish() {
  local mp
  if ((${#R[@]})); then
  summary ""
  summary "## engine vs the seed's script ($DEVICE, convnext_small, batch $BATCH, $STEPS steps; img/s over epochs 2..)"
  summary ""
  summary "| precision | engine img/s | seed img/s | engine/seed | engine train/loss | seed train/loss | engine best valid/acc | seed best valid/acc |"
  summary "|---|---|---|---|---|---|---|---|"
  for mp in fp16 bf16; do
    local e="${R[engine_$mp.ips]:-}" s="${R[seed_$mp.ips]:-}" ratio="-"
    [[ -n "$e" && -n "$s" ]] && ratio="$(awk -v a="$e" -v b="$s" 'BEGIN {printf "%.2fx", a / b}')"
    summary "| $mp | ${e:--} | ${s:--} | $ratio | ${R[engine_$mp.loss]:--} | ${R[seed_$mp.loss]:--} | ${R[engine_$mp.acc]:--} | ${R[seed_$mp.acc]:--} |"
  done
  fi
  summary ""
  summary "Total $((SECONDS - T0)) s of the ${BUDGET} s budget; exit $1."
  [[ -f "$BUNDLE/closure.txt" ]] && cp "$BUNDLE/closure.txt" "$OUT/closure.txt"
  echo "== summary: $SUMMARY"
  cat "$SUMMARY"
  exec >&- 2>&-  # let tee write the rest of gpu_check.log before the device tool collects $OUT
  wait "$TEE_PID" 2>/dev/null
}

# --- the stages ------------------------------------------------------------------------------------
run_stage preflight 120 preflight
rc=$?
if ((rc)); then finish 2; exit 2; fi
((PREFLIGHT_ONLY)) && { finish 0; exit 0; }
run_stage data 30 data || { finish 1; exit 1; }
if [[ -z "$ENGINE" ]]; then
  run_stage configure 150 configure || { finish 1; exit 1; }
  run_stage build 330 build || { finish 1; exit 1; }
fi
run_stage ldd 30 ldd_check || { finish 1; exit 1; }
mkdir -p "$RUNS"
if [[ "$DEVICE" == cpu ]]; then
  SEED=0
  run_stage engine_bf16 420 engine_run bf16
else
  for mp in fp16 bf16; do
    run_stage "engine_$mp" 100 engine_run "$mp"
    run_stage "seed_$mp" 110 seed_run "$mp"
  done
  run_stage nccl 60 nccl
fi
finish "$FAILED"
exit "$FAILED"
