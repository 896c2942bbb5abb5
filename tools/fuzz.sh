#!/usr/bin/env bash
# Fuzzing and sanitized tests (README, "Sanitizers and fuzzing"). One clang build, build-fuzz/,
# with -fsanitize=address,undefined and libFuzzer coverage (cmake/EngineSanitizers.cmake), serves both.
#
#   tools/fuzz.sh [SECONDS]        build the libFuzzer targets in fuzz/ and run each for SECONDS
#                                  (default 60) from its seed corpus fuzz/corpus/<name>/; prints
#                                  executions, new inputs and findings per target. Exit 1 on a finding.
#   tools/fuzz.sh --asan-tests [TEST...]
#                                  build and run unit-test executables under ASan + UBSan (default:
#                                  test_base test_io test_data test_optim test_models). Exit 1 on a failure.
#
# Environment: JOBS (build jobs, default 2), BUILD_DIR (default build-fuzz), TARGETS (fuzz targets,
# default "recipe digit_csv safetensors"), CXX (default clang++-14; g++ builds the sanitized tests only).
# New corpus inputs go to BUILD_DIR/fuzz-corpus/<name>/ (the committed seeds are only read);
# a finding is written to BUILD_DIR/fuzz-findings/<name>/ (crash-*, leak-*, timeout-*, oom-*):
# reproduce it with `BUILD_DIR/fuzz/<name>_fuzz FILE`, fix the reader, then add FILE to
# fuzz/corpus/<name>/ and a regression test beside the reader's tests.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
CXX=${CXX:-clang++-14}
TARGETS=${TARGETS:-recipe digit_csv safetensors}

# halt_on_error: the first report ends the process, so a test or a fuzz run fails on it.
# detect_leaks stays on: LibTorch's long-lived allocations are reachable from globals, which LSan
# does not report; no suppressions file is needed (none of its reports came from LibTorch).
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

if ! command -v "$CXX" >/dev/null; then
  echo "fuzz.sh: $CXX not found; install clang-14 (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
# libFuzzer needs clang; the sanitized tests alone also build with g++ (CI: CXX=g++ BUILD_DIR=build-asan).
fuzz=OFF
[[ $("$CXX" --version) == *clang* ]] && fuzz=ON
[[ "${1:-}" == "--asan-tests" || $fuzz == ON ]] || { echo "fuzz.sh: fuzzing needs clang, CXX=$CXX" >&2; exit 2; }
# The compiler only on the first configure: naming it again (g++ vs /usr/bin/c++) wipes the cache.
compiler=(); [[ -f "$BUILD_DIR/CMakeCache.txt" ]] || compiler=(-DCMAKE_CXX_COMPILER="$CXX")
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler[@]}" \
      -DENGINE_SANITIZE=address,undefined -DENGINE_FUZZ=$fuzz >/dev/null

if [[ "${1:-}" == "--asan-tests" ]]; then
  shift
  tests=("$@")
  [[ ${#tests[@]} -gt 0 ]] || tests=(test_base test_io test_data test_optim test_models)
  cmake --build "$BUILD_DIR" -j"$JOBS" --target "${tests[@]}"
  failed=0
  for t in "${tests[@]}"; do
    start=$SECONDS
    # Tests run from the source tree, as under ctest (recipes/ and data/ paths).
    if "$BUILD_DIR/tests/$t" >"$BUILD_DIR/$t.asan.log" 2>&1; then verdict=passed; else verdict=FAILED; failed=1; fi
    summary=$(grep -E "^\[doctest\] (test cases|assertions)" "$BUILD_DIR/$t.asan.log" | tr -s ' ' | paste -sd ' ' || true)
    printf '%-12s %-7s %4ds  %s\n' "$t" "$verdict" $((SECONDS - start)) "$summary"
    if [[ $verdict == FAILED ]]; then
      grep -E "ERROR: (Address|Leak)Sanitizer|runtime error|SUMMARY|ERROR:|FAILED" "$BUILD_DIR/$t.asan.log" | head -20
      echo "  (full log: $BUILD_DIR/$t.asan.log)"
    fi
  done
  exit $failed
fi

seconds=${1:-60}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "usage: tools/fuzz.sh [SECONDS] | --asan-tests [TEST...]" >&2; exit 2; }
cmake --build "$BUILD_DIR" -j"$JOBS" --target $(for t in $TARGETS; do echo "${t}_fuzz"; done)
findings=0
printf '%-12s %10s %8s %8s  %s\n' target executions exec/s new findings
for t in $TARGETS; do
  corpus="$BUILD_DIR/fuzz-corpus/$t" out="$BUILD_DIR/fuzz-findings/$t" log="$BUILD_DIR/fuzz-$t.log"
  rm -rf "$out"  # findings of an earlier run are in its report (and, once fixed, in fuzz/corpus/)
  mkdir -p "$corpus" "$out"
  # -malloc_limit_mb=256: a single allocation that large from an input of a few KB is an absurd
  # size taken from the input (a finding), long before it becomes a std::bad_alloc for a user.
  # -timeout=10: one input taking 10 s is a hang. Run from the source root: recipes name data/.
  "$BUILD_DIR/fuzz/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      -malloc_limit_mb=256 -print_final_stats=1 -artifact_prefix="$out/" \
      "$corpus" "fuzz/corpus/$t" >"$log" 2>&1 || true
  runs=$(grep -oP 'stat::number_of_executed_units:\s*\K[0-9]+' "$log" | tail -1 || true)
  rate=$(grep -oP 'stat::average_exec_per_sec:\s*\K[0-9]+' "$log" | tail -1 || true)
  new=$(grep -oP 'stat::new_units_added:\s*\K[0-9]+' "$log" | tail -1 || true)
  found=$(find "$out" -type f | sort)
  printf '%-12s %10s %8s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "${new:-?}" "${found:-none}"
  if [[ -n "$found" ]]; then
    findings=1
    grep -E "ERROR: |runtime error|SUMMARY|uncaught|out-of-memory|timeout" "$log" | head -5 | sed 's/^/    /'
    echo "    (full log: $log)"
  fi
done
exit $findings
