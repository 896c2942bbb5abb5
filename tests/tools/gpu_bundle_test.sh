#!/usr/bin/env bash
# tests/tools/gpu_bundle_test.sh checker [ENGINE]   tools/gpu_bundle.sh --check on synthetic bundles
# tests/tools/gpu_bundle_test.sh bundle [ENGINE]    the real bundle's closure + probe (skips: exit 77)
# tests/tools/gpu_bundle_test.sh preflight          tools/gpu_check.sh's preflight on a CPU machine
#
# `checker` runs everywhere (CI too): synthetic bundles made of real Debian libraries (tools/setup.sh
# installs them) must be judged right: complete, a missing dependency named, a dependency's own
# dependency named next, bad symlinks refused, an extra ELF's needs checked with torch's accepted.
# `bundle` needs a bundle built by tools/gpu_bundle.sh (~40 MB of downloads, so CI does not build
# one): $ENGINE_GPU_BUNDLE, else <repo>/gpu_bundle; without one it prints why and exits 77 (ctest:
# skipped). `preflight` proves that on a machine without GPU the GPU check stops at once, exit 2,
# listing what is missing.
set -uo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
TOOL="$REPO/tools/gpu_bundle.sh"
fail() { echo "FAIL: $*"; exit 1; }
MODE="${1:-}"
ENGINE="${2:-}"

case "$MODE" in
checker)
  L=/usr/lib/x86_64-linux-gnu
  for f in libopencv_imgproc.so.406 libopencv_core.so.406 libtomlplusplus.so.3; do
    [[ -e "$L/$f" ]] || fail "$L/$f missing: run tools/setup.sh (it installs the OpenCV and toml++ packages)"
  done
  W="$(mktemp -d)"
  trap 'rm -rf "$W"' EXIT
  fresh() {  # an empty bundle with one library folder
    rm -rf "$W/b"
    mkdir -p "$W/b/root/usr/lib/x86_64-linux-gnu" "$W/b/stubs"
    printf 'root/usr/lib/x86_64-linux-gnu\nstubs\n' > "$W/b/libdirs.txt"
  }
  put() { cp -L "$L/$1" "$W/b/root/usr/lib/x86_64-linux-gnu/$1"; }
  check() { out="$("$TOOL" --check "$W/b" "$@" 2>&1)"; rc=$?; }
  n=0
  expect() {  # description, expected rc, grep pattern that must match, [pattern that must not]
    [[ $rc == "$2" ]] || fail "$1: exit $rc, expected $2; output:"$'\n'"$out"
    grep -qE "$3" <<< "$out" || fail "$1: output lacks /$3/:"$'\n'"$out"
    if [[ -n "${4:-}" ]] && grep -qE "$4" <<< "$out"; then fail "$1: output has /$4/:"$'\n'"$out"; fi
    n=$((n + 1)); echo "ok: $1"
  }
  fresh; put libtomlplusplus.so.3; check
  expect "toml++ alone needs only base libraries" 0 "closure: complete" "MISSING"
  grep -qE '^max_versions: .*GLIBC_2\.[0-9]+' "$W/b/closure.txt" || fail "closure.txt lacks the GLIBC version toml++ needs"
  grep -qE '^base_libraries: .*libstdc\+\+\.so\.6' "$W/b/closure.txt" || fail "closure.txt lacks libstdc++ among the base libraries"
  n=$((n + 1)); echo "ok: closure.txt records base libraries and symbol versions"
  fresh; put libopencv_imgproc.so.406; check
  expect "imgproc without core" 1 "libopencv_imgproc\.so\.406 needs libopencv_core\.so\.406"
  put libopencv_core.so.406; check
  expect "core added: its own dependencies are named next" 1 "libopencv_core\.so\.406 needs libtbb\.so\.12" "needs libopencv_core"
  fresh; put libtomlplusplus.so.3; ln -s libnothere.so.1 "$W/b/root/usr/lib/x86_64-linux-gnu/libdangling.so"; check
  expect "a dangling symlink" 1 "dangling symlink root/usr/lib/x86_64-linux-gnu/libdangling\.so"
  fresh; put libtomlplusplus.so.3; ln -s "$L/libtomlplusplus.so.3" "$W/b/root/usr/lib/x86_64-linux-gnu/libabs.so"; check
  expect "an absolute symlink" 1 "absolute symlink root/usr/lib/x86_64-linux-gnu/libabs\.so"
  if [[ -n "$ENGINE" && -f "$ENGINE" ]]; then
    fresh; put libtomlplusplus.so.3; check "$ENGINE"
    expect "the engine: OpenCV missing, torch's libraries accepted" 1 "needs libopencv_core\.so\.406" "needs lib(torch|c10)"
  else
    echo "note: no engine binary given: the extra-ELF case is left out"
  fi
  for f in "$REPO/tools/gpu_bundle.sh" "$REPO/tools/gpu_check.sh"; do bash -n "$f" || fail "bash -n $f"; done
  if command -v shellcheck >/dev/null; then
    shellcheck "$REPO/tools/gpu_bundle.sh" "$REPO/tools/gpu_check.sh" "$0" || fail "shellcheck"
    echo "ok: shellcheck"
  fi
  echo "checker: $n checks passed"
  ;;
bundle)
  B="${ENGINE_GPU_BUNDLE:-$REPO/gpu_bundle}"
  if [[ ! -f "$B/libdirs.txt" ]]; then
    echo "skipped: no bundle at $B (tools/gpu_bundle.sh gpu_bundle builds one from ~40 MB of .deb files;"
    echo "         ENGINE_GPU_BUNDLE=DIR checks another)"
    exit 77
  fi
  [[ -f "$ENGINE" ]] || { [[ -n "$ENGINE" ]] && echo "note: $ENGINE not built: the bundle alone is checked"; ENGINE=""; }
  exec "$TOOL" --check "$B" --probe ${ENGINE:+"$ENGINE"}
  ;;
preflight)
  if command -v nvidia-smi >/dev/null; then echo "skipped: this machine has nvidia-smi (run tools/gpu_check.sh itself)"; exit 77; fi
  W="$(mktemp -d)"
  trap 'rm -rf "$W"' EXIT
  mkdir -p "$W/empty-bundle"
  t0=$SECONDS
  OUT="$W/out" "$REPO/tools/gpu_check.sh" --bundle "$W/empty-bundle" --build-dir "$W/build" > "$W/log" 2>&1
  rc=$?
  cat "$W/log"
  [[ $rc == 2 ]] || fail "gpu_check.sh exited $rc on a machine without GPU, expected 2"
  ((SECONDS - t0 < 60)) || fail "the preflight took $((SECONDS - t0)) s"
  s="$(cat "$W/out/summary.md")"
  grep -q '^- \*\*preflight\*\* FAILED (missing pieces)' <<< "$s" || fail "summary.md has no failed preflight line"
  grep -q 'nvidia-smi' <<< "$s" || fail "summary.md does not name the missing nvidia-smi"
  grep -q "the bundle $W/empty-bundle" <<< "$s" || fail "summary.md does not name the missing bundle"
  grep -qE '^- \*\*(data|configure|build)\*\*' <<< "$s" && fail "a stage after the preflight ran"
  echo "preflight: exit 2 in $((SECONDS - t0)) s, every missing piece in summary.md"
  ;;
*)
  echo "usage: $0 checker [ENGINE] | bundle [ENGINE] | preflight" >&2
  exit 2
  ;;
esac
