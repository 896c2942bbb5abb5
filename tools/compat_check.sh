#!/usr/bin/env bash
# Compiles every translation unit of a configured build (the engine, its tests, examples, bench)
# against LibTorch 2.x's headers with CUDA and NCCL on, syntax only: the CUDA/NCCL branches and the
# TORCH_VERSION >= 2.x branches that the Debian 12 build (LibTorch 1.13, CPU) never compiles.
# A GPU machine is lent rarely and briefly (tools/gpu_check.sh); a compile error found there costs
# that session's device time, found here it costs nothing.
#
# The headers: Debian trixie's libtorch-cuda-dev (LibTorch 2.6, built with CUDA and NCCL), fetched
# with apt into a private cache (no root, the system's apt state untouched) and unpacked with
# dpkg -x. CUDA's and NCCL's headers: /usr/local/cuda/include, else $CUDA_HOME/include (c10/cuda
# includes cuda_runtime_api.h); without them only the 2.x CPU paths are checked, with a warning.
#
# Usage: tools/compat_check.sh [build-dir]     (default: build; configured by tools/setup.sh)
# Env:   JOBS (default: nproc), ENGINE_COMPAT_CACHE (default: ~/.cache/engine/libtorch-compat),
#        ONLY=<regex>: only the TUs whose path, or whose unity batch's list of sources, matches
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
JOBS=${JOBS:-$(nproc)}
CACHE=${ENGINE_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/engine/libtorch-compat}
SUITE=trixie
PACKAGE=libtorch-cuda-dev

[ -f "$BUILD/compile_commands.json" ] || { echo "compat_check: $BUILD/compile_commands.json missing: run tools/setup.sh $BUILD first" >&2; exit 2; }
CUDA_INC=""
for d in /usr/local/cuda/include "${CUDA_HOME:-/nonexistent}/include"; do
  [ -f "$d/cuda_runtime_api.h" ] && { CUDA_INC=$d; break; }
done
NCCL_INC=""
if [ -z "$CUDA_INC" ]; then
  echo "compat_check: warning: no CUDA headers (cuda_runtime_api.h in /usr/local/cuda/include or \$CUDA_HOME/include):" \
       "checking LibTorch 2.x's CPU paths only, without USE_C10D_NCCL"
else
  for d in "$CUDA_INC" /usr/include; do [ -f "$d/nccl.h" ] && { NCCL_INC=$d; break; }; done
  [ -n "$NCCL_INC" ] || echo "compat_check: warning: no nccl.h: engine/accelerator/nccl_collectives.cpp compiles its stub only"
fi

# 1. LibTorch 2.x headers, once per cache.
ROOT=$CACHE/root
if [ ! -f "$ROOT/.done" ]; then
  rm -rf "$CACHE"; mkdir -p "$CACHE/lists/partial" "$CACHE/archives/partial" "$ROOT"
  echo "deb http://deb.debian.org/debian $SUITE main contrib" > "$CACHE/sources.list"
  APT=(-o Dir::Etc::sourcelist="$CACHE/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$CACHE/lists"
       -o Dir::Cache="$CACHE" -o Dir::Cache::archives="$CACHE/archives" -o APT::Get::List-Cleanup=0
       -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
  echo "compat_check: fetching $PACKAGE from Debian $SUITE"
  apt-get -q "${APT[@]}" update >/dev/null
  (cd "$CACHE/archives" && apt-get -q "${APT[@]}" download "$PACKAGE" >/dev/null)
  deb=$(ls "$CACHE"/archives/${PACKAGE}_*.deb)
  dpkg -x "$deb" "$ROOT"
  basename "$deb" > "$ROOT/.done"
fi
INC=$ROOT/usr/include
VERSION=$(sed -n 's/^#define TORCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' "$INC/torch/csrc/api/include/torch/version.h" | paste -sd.)
echo "compat_check: LibTorch $VERSION headers ($(cat "$ROOT/.done")), CUDA ${CUDA_INC:-none}${NCCL_INC:+, NCCL $NCCL_INC}, $JOBS jobs"

# 2. Each compile command, rewritten: 2.x's include dirs before Debian's 1.13 ones, USE_C10D_NCCL (what
#    a CUDA LibTorch's torch_cuda target adds), the precompiled header's text instead of its 1.13 .gch,
#    -fsyntax-only instead of -c/-o. Commands go through python3's shlex: paths may hold spaces.
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
python3 - "$BUILD/compile_commands.json" "$INC" "$CUDA_INC" "${NCCL_INC:-}" "$WORK" "${ONLY:-}" <<'PY'
import json, os, re, shlex, shutil, sys
db, inc, cuda, nccl, work, only = sys.argv[1:7]
extra = ["-isystem", inc + "/torch/csrc/api/include", "-isystem", inc]
if cuda:  # what a CUDA LibTorch's torch_cuda target adds: USE_C10D_NCCL
    extra += ["-isystem", cuda, "-DUSE_C10D_NCCL"]
if nccl and nccl != cuda:
    extra += ["-isystem", nccl]
entries = json.load(open(db))
def argv(entry):
    return shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
# The precompiled header is built once with its own include dirs (OpenCV's among them) and reused by
# targets that lack them: a TU that includes its text needs them too.
pch_dirs = {}
for entry in entries:
    if entry["file"].endswith("cmake_pch.hxx.cxx"):
        a = argv(entry)
        dirs = [x for k, v in zip(a, a[1:]) if k in ("-I", "-isystem") and not v.endswith("/torch/csrc/api/include")
                for x in (k, v)]
        pch_dirs[entry["file"][:-len(".cxx")]] = dirs
n = 0
for entry in entries:
    src = entry["file"]
    if src.endswith("cmake_pch.hxx.cxx"):
        continue
    if only and not (re.search(only, src) or ("/Unity/" in src and re.search(only, open(src).read()))):
        continue
    args = argv(entry)
    out, i = [args[0]] + extra, 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-c"):
            i += 2; continue
        if a == "-isystem" and args[i + 1].endswith("/torch/csrc/api/include"):
            i += 2; continue
        if a == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
            # a copy without the .gch beside it: GCC would otherwise load the 1.13 precompiled header
            copy = os.path.join(work, "pch%d.hxx" % n)
            shutil.copy(args[i + 1], copy)
            out += pch_dirs.get(args[i + 1], []) + ["-include", copy]; i += 2; continue
        if a == "-Winvalid-pch":
            i += 1; continue
        out.append(a); i += 1
    out += ["-fsyntax-only", src]
    with open(os.path.join(work, "tu%03d.sh" % n), "w") as f:
        f.write("cd %s && exec %s\n" % (shlex.quote(entry["directory"]), " ".join(map(shlex.quote, out))))
        f.write("# %s\n" % src)
    n += 1
print("compat_check: %d translation units" % n)
PY
check() {
  local script=$1 src log
  src=$(sed -n 's/^# //p' "$script")
  log=${script%.sh}.log
  if bash "$script" >"$log" 2>&1; then
    echo "ok    ${src#"$PWD"/}"
  else
    echo "FAIL  ${src#"$PWD"/}"; touch "${script%.sh}.failed"
  fi
}
export -f check
ls "$WORK"/tu*.sh | xargs -P "$JOBS" -I{} bash -c 'check {}'
failed=$(find "$WORK" -name "*.failed" | wc -l)
if [ "$failed" -gt 0 ]; then
  for f in "$WORK"/*.failed; do
    echo "---- $(sed -n 's/^# //p' "${f%.failed}.sh")"; grep -E "error|note: " "${f%.failed}.log" | head -40
  done
  echo "compat_check: $failed translation unit(s) do not compile against LibTorch $VERSION" >&2
  exit 1
fi
echo "compat_check: every translation unit compiles against LibTorch $VERSION${CUDA_INC:+ with CUDA}${NCCL_INC:+ and NCCL}"
