#!/usr/bin/env bash
# The engine against LibTorch 2.x, on a machine with Debian 12's LibTorch 1.13 and no GPU. Two checks:
#
#   tools/compat_check.sh [build-dir]        every translation unit of a configured build (the engine,
#       its tests, examples, bench; default build/) compiled, syntax only, against LibTorch 2.x's headers
#       with CUDA and NCCL on: the CUDA/NCCL branches and the TORCH_VERSION >= 2 branches the 1.13 build
#       never compiles (~5 min on 2 cores; CI runs it). A GPU machine is lent rarely and briefly
#       (tools/gpu_check.sh): a compile error found there costs its device time, found here nothing.
#   tools/compat_check.sh --run [dir] [ctest args]   the whole tree built against LibTorch 2.x (CPU)
#       in dir (default build-torch2/) and ctest run there: 2.x's behaviour, not only its API.
#       TARGETS="engine test_train" builds those targets only (then give ctest a -R that fits them).
#
# LibTorch 2.x: Debian trixie's (2.6), fetched with apt into a private cache (the system's apt state
# untouched, nothing installed) and unpacked with dpkg -x. The header check: libtorch-cuda-dev alone (built
# with CUDA and NCCL); CUDA's and NCCL's headers from /usr/local/cuda/include or $CUDA_HOME/include
# (without them only the 2.x CPU paths are checked, with a warning). --run: libtorch-dev and
# libgloo-dev with every package they depend on, trixie's glibc and libstdc++ included (~180 MB);
# the binaries get trixie's dynamic loader and a search path of trixie's libraries, then Debian
# 12's (OpenCV, TOML++, OpenBLAS: trixie's libblas3 is unpacked without its alternatives link, so
# libblas.so.3 resolves to Debian 12's OpenBLAS).
#
# Env: JOBS (default: nproc), TARGETS (--run: default all), ENGINE_COMPAT_CACHE (default: ~/.cache/engine/libtorch-compat),
#      ONLY=<regex> (headers): only the TUs whose path, or whose unity batch's list of sources, matches
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=headers
if [ "${1:-}" = "--run" ]; then MODE=run; shift; fi
JOBS=${JOBS:-$(nproc)}
CACHE=${ENGINE_COMPAT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/engine/libtorch-compat}
SUITE=trixie

# unpack <root> <apt verb> <packages...>: the .deb files apt's <verb> fetches, unpacked into <root>, once.
# "download" fetches the packages alone; "install" with an empty dpkg status fetches their whole closure.
unpack() {
  local root=$1 verb=$2; shift 2
  [ -f "$root/.done" ] && return 0
  local dir=$root.apt
  rm -rf "$root"; mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$root"
  echo "deb http://deb.debian.org/debian $SUITE main contrib" > "$dir/sources.list"
  : > "$dir/status"
  local apt=(-o Dir::Etc::sourcelist="$dir/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$dir/lists"
             -o Dir::State::status="$dir/status" -o Dir::Cache="$dir" -o Dir::Cache::archives="$dir/archives"
             -o APT::Get::List-Cleanup=0 -o APT::Install-Recommends=0 -o Debug::NoLocking=1 -o Acquire::Retries=3
             -o APT::Sandbox::User="$(id -un)")
  echo "compat_check: fetching $* from Debian $SUITE"
  apt-get -q "${apt[@]}" update >/dev/null
  if [ "$verb" = download ]; then
    (cd "$dir/archives" && apt-get -q "${apt[@]}" download "$@" >/dev/null)
    for p in "$@"; do dpkg -x "$(ls "$dir"/archives/"${p}"_*.deb)" "$root"; done
  else
    apt-get -q -y "${apt[@]}" install --download-only "$@" >/dev/null
    for d in "$dir"/archives/*.deb; do dpkg -x "$d" "$root"; done
  fi
  (cd "$dir/archives" && ls "${1}"_*.deb) > "$root/.done"
}
torch_version() {
  sed -n 's/^#define TORCH_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)/\2/p' "$1/torch/csrc/api/include/torch/version.h" | paste -sd.
}

if [ "$MODE" = run ]; then
  BUILD=${1:-build-torch2}; [ $# -gt 0 ] && shift
  ROOT=$CACHE/runtime
  unpack "$ROOT" install libtorch-dev libgloo-dev
  LIB=$ROOT/usr/lib/x86_64-linux-gnu
  # A prefix that holds only LibTorch's and Gloo's headers (trixie's glibc headers must not reach the
  # compiler: Debian 12's libc is what the binaries link against) and links to every library.
  PREFIX=$CACHE/prefix
  if [ ! -f "$PREFIX/.done" ]; then
    rm -rf "$PREFIX"; mkdir -p "$PREFIX/usr/include" "$PREFIX/usr/lib/x86_64-linux-gnu"
    for p in libtorch-dev libgloo-dev; do
      dpkg-deb -c "$(ls "$ROOT".apt/archives/${p}_*.deb)" | awk '{print $6}' | sed -n 's|^\./usr/include/\([^/]*\).*|\1|p'
    done | sort -u | while read -r h; do ln -s "$ROOT/usr/include/$h" "$PREFIX/usr/include/$h"; done
    for f in "$LIB"/*; do ln -s "$f" "$PREFIX/usr/lib/x86_64-linux-gnu/"; done
    touch "$PREFIX/.done"
  fi
  PL=$PREFIX/usr/lib/x86_64-linux-gnu
  echo "compat_check: LibTorch $(torch_version "$ROOT/usr/include") ($(cat "$ROOT/.done")), CPU, build in $BUILD"
  # find_package(Torch) searches the system's 1.13 before its own folder: every path given.
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$PL/cmake/Torch" -DCaffe2_DIR="$PL/cmake/Caffe2" \
    -DTORCH_LIBRARY="$PL/libtorch.so" -Dc10_LIBRARY="$PL/libc10.so" -DENGINE_GLOO_INCLUDE_DIR="$PREFIX/usr/include" \
    "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -Wl,-rpath-link,$LIB -Wl,--dynamic-linker=$LIB/ld-linux-x86-64.so.2 -Wl,--disable-new-dtags -Wl,-rpath,$LIB:/usr/lib/x86_64-linux-gnu" >/dev/null
  read -r -a targets <<< "${TARGETS:-all}"
  cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"
  "$BUILD/engine" --version
  ctest --test-dir "$BUILD" --output-on-failure -j"$JOBS" "$@"
  exit 0
fi

BUILD=${1:-build}
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

# 1. LibTorch 2.x headers with CUDA, once per cache.
ROOT=$CACHE/headers
unpack "$ROOT" download libtorch-cuda-dev
INC=$ROOT/usr/include
VERSION=$(torch_version "$INC")
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
    # LibTorch marks what 2.x replaced [[deprecated]], and most of it warns at run time on every call too
    # (TORCH_WARN_DEPRECATION: a line on stderr each time): an error here, not a message in a user's output.
    out += ["-Werror=deprecated-declarations", "-fsyntax-only", src]
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
