#!/usr/bin/env bash
# tools/gpu_bundle.sh OUT [--build-dir DIR] [--no-probe]     build the bundle (here: apt, network)
# tools/gpu_bundle.sh --check BUNDLE [--probe] [ELF...]       check a bundle (and ELF files) only
#
# Everything the GPU machine lacks to build and run `engine` against its pip torch, in one folder
# that the device tool carries (`carry: ["gpu_bundle"]`, 64 MiB a call with the working tree):
#   OUT/root/      Debian packages unpacked with dpkg -x (headers, CMake configs, shared libraries),
#                  docs/man pages/locales/static libraries/programs left out, plus the alternatives
#                  symlinks (libblas.so.3, liblapack.so.3) that a package's postinst would make
#   OUT/stubs/     stand-ins for codec libraries the engine never uses (GDAL, DICOM), see STUBS
#   OUT/data/      data/mnist/*.csv.gz (the seed recipe's data) and digits_png.tar.gz
#   OUT/libdirs.txt  the bundle's library folders (relative): rpath / LD_LIBRARY_PATH there
#   OUT/manifest.txt packages and versions, stubs, base libraries and symbol versions it needs
#
# Nothing is hand-listed: the -dev packages are those owning what CMakeLists.txt's find_package /
# find_path / find_library calls found in a configured CPU build (default: build/), plus each one's
# runtime package; the runtime closure follows the ELF files' DT_NEEDED: each library a bundled
# file needs comes from that package's own Depends (Debian's shlibs guarantee it is there), is one
# of BASE_SONAMES (the image has them: glibc, libstdc++, libgcc_s, zlib) or matches STUBS.
#
# --check proves the closure with readelf, not ldd (ldd would resolve against this machine): every
# DT_NEEDED of every ELF file in the bundle, and of each ELF named (e.g. build/engine-core), is found in
# the bundle's library folders, is a base library, or is torch's (TORCH_PATTERNS: the wheel's
# torch/lib and nvidia/*/lib). --probe also builds a small program with CMakeLists.txt's own
# find_* calls re-rooted into the bundle (CMAKE_FIND_ROOT_PATH, ONLY) and runs it with
# LD_BIND_NOW=1 on a real digit: PNG/JPEG/WebP/TIFF round trips, a LANCZOS4 resize, a TOML recipe.
#
# Exit codes: 0 ok; 1 the bundle is incomplete or too large (the message says what); 2 usage or a
# tool missing here.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$(pwd)"
MULTIARCH=x86_64-linux-gnu
BUDGET_MIB=64   # the device tool's limit for the working tree plus carried paths, per call

# --- Written lists --------------------------------------------------------------------------------
# Libraries the GPU image is known to have (python3 and torch need them); gpu_check.sh's preflight
# verifies each one that the bundle needs before building. Their packages are never downloaded.
BASE_SONAMES=(libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2 libutil.so.1
              ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 libz.so.1)
BASE_PACKAGES=(libc6 libstdc++6 libgcc-s1 zlib1g)
# What the pip torch wheel and the nvidia-* wheels it depends on provide (torch/lib, nvidia/*/lib),
# and libcuda.so.1, the driver's.
TORCH_PATTERNS=('libtorch*' 'libc10*' 'libcaffe2*' 'libshm*' 'libgomp*' 'libcuda.so*' 'libcudart*' 'libcudnn*'
                'libcublas*' 'libcufft*' 'libcurand*' 'libcusolver*' 'libcusparse*' 'libnccl*' 'libnvrtc*'
                'libnvJitLink*' 'libnvToolsExt*' 'libnvtx*' 'libcupti*' 'libcufile*' 'libnvshmem*' 'libnvperf*'
                'libcudss*' 'libnvjpeg*' 'libnvidia-ml*')
# Debian's libopencv_imgcodecs links GDAL (~200 MB of libraries with its closure) and GDCM (12 MB)
# for geospatial rasters and DICOM, which the engine never decodes (PNG, JPEG, BMP, WebP, TIFF stay
# real). Each is replaced by a stub with the same SONAME defining every function the bundle
# imports from it: a call returns 0 (NULL/false/failure) and prints which stub was called, except
# STUB_SILENT, which imgcodecs calls while registering its decoders.
STUBS=('libgdal.so.*' 'libgdcm*.so.*')
STUB_SILENT=(GDALAllRegister)
# Left out of every unpacked package.
TRIM=(usr/share/doc usr/share/man usr/share/info usr/share/locale usr/share/lintian usr/share/bug
      usr/share/bash-completion usr/share/gdb usr/bin usr/sbin bin sbin)

die() { echo "gpu_bundle.sh: error: $*" >&2; exit 1; }
usage() { echo "gpu_bundle.sh: $*" >&2; exit 2; }
say() { echo "gpu_bundle.sh: $*"; }

in_list() {  # name, list... : true when name matches one of the glob patterns
  local n="$1" p; shift
  for p in "$@"; do
    # shellcheck disable=SC2053  # the patterns are globs on purpose
    [[ "$n" == $p ]] && return 0
  done
  return 1
}

is_elf() { [[ "$(od -An -tx1 -N4 "$1" 2>/dev/null | tr -d ' \n')" == 7f454c46 ]]; }

elf_files() {  # dir: regular ELF files below it (shared libraries, programs)
  local f
  while IFS= read -r -d '' f; do is_elf "$f" && printf '%s\n' "$f"; done \
    < <(find "$1" -type f \( -name '*.so*' -o -perm -u+x \) -print0 2>/dev/null)
  return 0
}

needed_of() { readelf -dW "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p'; }
soname_of() { readelf -dW "$1" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]$/\1/p'; }

# --- The closure check (also the --check mode) -----------------------------------------------------
# check_closure BUNDLE ELF...: prints one line per problem and a summary; returns 1 on any problem.
# Writes BUNDLE/closure.txt (the base libraries and the highest GLIBC/GLIBCXX/CXXABI versions the
# bundle's files ask for), which gpu_check.sh's preflight compares with the GPU machine's.
check_closure() {
  local bundle="$1"; shift
  local -a libdirs=() extra=("$@") problems=()
  [[ -f "$bundle/libdirs.txt" ]] || { echo "closure: $bundle/libdirs.txt missing (not a bundle made by tools/gpu_bundle.sh)"; return 1; }
  local d
  while IFS= read -r d; do [[ -n "$d" ]] && libdirs+=("$bundle/$d"); done < "$bundle/libdirs.txt"
  # Symlinks must stay inside the bundle and point at something (the device tool carries links as links).
  local l t
  while IFS= read -r -d '' l; do
    t="$(readlink "$l")"
    [[ "$t" == /* ]] && problems+=("absolute symlink ${l#"$bundle"/} -> $t (it would point outside the bundle there)")
    [[ -e "$l" ]] || problems+=("dangling symlink ${l#"$bundle"/} -> $t")
  done < <(find "$bundle" -type l -print0)

  local -A base_used=() torch_used=() stub_used=()
  local files=() f n found edges=0
  mapfile -t files < <(elf_files "$bundle")
  files+=("${extra[@]}")
  for f in "${files[@]}"; do
    [[ -f "$f" ]] || { problems+=("$f: no such file"); continue; }
    while IFS= read -r n; do
      [[ -n "$n" ]] || continue
      edges=$((edges + 1))
      found=""
      for d in "${libdirs[@]}"; do
        if [[ -e "$d/$n" ]]; then found="$d/$n"; break; fi
      done
      if [[ -n "$found" ]]; then
        [[ "$found" == "$bundle/stubs/"* ]] && stub_used[$n]=1
      elif in_list "$n" "${BASE_SONAMES[@]}"; then base_used[$n]=1
      elif in_list "$n" "${TORCH_PATTERNS[@]}"; then torch_used[$n]=1
      else problems+=("${f#"$bundle"/} needs $n: not in the bundle's library folders, not a base library, not torch's")
      fi
    done < <(needed_of "$f")
  done
  # Highest symbol versions asked of the base libraries (readelf -V: the version-needs section).
  local versions
  versions="$(for f in "${files[@]}"; do [[ -f "$f" ]] && readelf -VW "$f" 2>/dev/null; done |
              grep -oE 'Name: (GLIBC|GLIBCXX|CXXABI)_[0-9.]+' | awk '{print $2}' | sort -u -V |
              awk -F_ '{max[$1]=$0} END{for (k in max) print max[k]}' | sort)"
  ((${#extra[@]})) || {  # the bundle's own record: not when other files were checked with it
    echo "# written by tools/gpu_bundle.sh --check; read by tools/gpu_check.sh's preflight"
    echo "base_libraries: ${!base_used[*]}"
    echo "stubbed: ${!stub_used[*]}"
    echo "torch_libraries: ${!torch_used[*]}"
    echo "max_versions: $(echo "$versions" | tr '\n' ' ')"
  } > "$bundle/closure.txt"
  local stubs="${!stub_used[*]}" torchs="${!torch_used[*]}"
  echo "closure: ${#files[@]} ELF files, $edges DT_NEEDED entries; base libraries: ${!base_used[*]}"
  echo "closure: stubs used: ${stubs:-none}; torch's: ${torchs:-none}"
  echo "closure: highest symbol versions needed: $(echo "$versions" | tr '\n' ' ')"
  if ((${#problems[@]})); then
    printf 'closure: MISSING: %s\n' "${problems[@]}"
    return 1
  fi
  echo "closure: complete"
}

# --- The probe: CMakeLists.txt's find_* calls, re-rooted into the bundle ---------------------------
# The find_package/find_path/find_library lines of CMakeLists.txt, except torch's and Threads: the
# same calls the GPU build makes, copied rather than imitated. One call per line (the file's style).
cmake_find_lines() {
  grep -E '^\s*find_(package|path|library)\(' "$REPO/CMakeLists.txt" |
    grep -vE 'find_package\((Torch|Threads|CUDAToolkit)\b'
}

probe_bundle() {  # bundle: builds and runs the probe; returns 1 on failure
  local bundle="$1" work rc=0
  bundle="$(cd "$bundle" && pwd)"
  work="$(mktemp -d)"
  local csv="$REPO/data/mnist/train.csv" recipe="$REPO/recipes/mnist_convnext_small.toml"
  if [[ ! -f "$csv" ]]; then
    [[ -f "$bundle/data/mnist/train.csv.gz" ]] || { echo "probe: no data/mnist/train.csv (tools/setup.sh fetches it)"; return 1; }
    gzip -dc "$bundle/data/mnist/train.csv.gz" > "$work/train.csv"; csv="$work/train.csv"
  fi
  mkdir -p "$work/src"
  {
    echo 'cmake_minimum_required(VERSION 3.18)'
    echo 'project(gpu_bundle_probe CXX)'
    echo 'set(CMAKE_CXX_STANDARD 17)'
    echo '# The find_* calls of the engine'"'"'s CMakeLists.txt, verbatim:'
    cmake_find_lines
    cat <<'EOF'
add_executable(probe probe.cpp)
target_include_directories(probe SYSTEM PRIVATE ${OPENCV_INCLUDE_DIR})
target_link_libraries(probe PRIVATE ${OPENCV_CORE_LIB} ${OPENCV_IMGPROC_LIB} ${OPENCV_IMGCODECS_LIB}
                      tomlplusplus::tomlplusplus fmt::fmt-header-only nlohmann_json::nlohmann_json CLI11::CLI11)
get_cmake_property(vars CACHE_VARIABLES)  # every path a find_* call cached
foreach(v ${vars})
  get_property(type CACHE ${v} PROPERTY TYPE)
  if(type MATCHES "^(FILE)?PATH$" AND NOT v MATCHES "^CMAKE_" AND IS_ABSOLUTE "${${v}}")
    message(STATUS "probe found ${v} = ${${v}}")
  endif()
endforeach()
EOF
  } > "$work/src/CMakeLists.txt"
  cat > "$work/src/probe.cpp" <<'EOF'
// Uses each bundled library the way the engine does: a real MNIST digit (first row of train.csv)
// through the image codecs and a LANCZOS4 resize, a recipe through toml++, json, CLI11 and fmt.
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  if (argc != 3) return 2;
  std::ifstream csv(argv[1]);
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  std::stringstream cells(row);
  std::string cell;
  std::getline(cells, cell, ',');
  const int label = std::stoi(cell);
  cv::Mat digit(28, 28, CV_8UC1);
  for (int i = 0; i < 28 * 28 && std::getline(cells, cell, ','); ++i) digit.data[i] = static_cast<uchar>(std::stoi(cell));
  if (cv::countNonZero(digit) < 50) { fmt::print(stderr, "probe: the digit has too few ink pixels\n"); return 1; }
  for (const char* ext : {".png", ".bmp", ".tiff", ".webp", ".jpg"}) {
    std::vector<uchar> bytes;
    if (!cv::imencode(ext, digit, bytes)) { fmt::print(stderr, "probe: imencode {} failed\n", ext); return 1; }
    cv::Mat back = cv::imdecode(bytes, cv::IMREAD_GRAYSCALE);
    const double diff = back.empty() ? 1e9 : cv::norm(back, digit, cv::NORM_INF);
    const bool lossy = std::string(ext) == ".jpg" || std::string(ext) == ".webp";
    if (back.empty() || diff > (lossy ? 96 : 0)) { fmt::print(stderr, "probe: {} round trip differs by {}\n", ext, diff); return 1; }
  }
  cv::Mat big;
  cv::resize(digit, big, cv::Size(56, 56), 0, 0, cv::INTER_LANCZOS4);
  auto recipe = toml::parse_file(argv[2]);
  const std::string model = recipe["model"]["name"].value_or(std::string("?"));
  CLI::App app("probe");
  nlohmann::json j{{"label", label}, {"model", model}, {"resized", {big.rows, big.cols}}, {"ink", cv::countNonZero(big)}};
  fmt::print("probe ok: {}\n", j.dump());
  return model == "?" ? 1 : 0;
}
EOF
  local -a libdirs=()
  local d ldpath=""
  while IFS= read -r d; do [[ -n "$d" ]] && libdirs+=("$bundle/$d"); done < "$bundle/libdirs.txt"
  ldpath="$(IFS=:; echo "${libdirs[*]}")"
  # Re-rooted search: find_package/find_path/find_library look only inside the bundle, as on the
  # GPU machine where none of these packages is installed.
  if ! cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
       "-DCMAKE_FIND_ROOT_PATH=$bundle/root" -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY \
       -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
       "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$ldpath" > "$work/configure.log" 2>&1; then
    tail -n 25 "$work/configure.log"; echo "probe: configure against the bundle failed"; rm -rf "$work"; return 1
  fi
  grep -E 'probe found' "$work/configure.log" | sed 's/^-- /probe: /'
  if [[ -n "$(grep -E 'probe found .* = ' "$work/configure.log" | awk -v b="$bundle/" 'index($NF, b) != 1')" ]]; then
    echo "probe: a find_* call found something outside the bundle"; rc=1
  fi
  if ! cmake --build "$work/build" -j "$(nproc)" > "$work/build.log" 2>&1; then
    tail -n 25 "$work/build.log"; echo "probe: build against the bundle failed"; rm -rf "$work"; return 1
  fi
  # Every library the probe loads, base libraries apart, must come from the bundle (here ldd is
  # the point: it shows what the loader picks with the bundle first on the path).
  local bad
  bad="$(LD_LIBRARY_PATH="$ldpath" ldd "$work/build/probe" | awk '$2 == "=>" {print $1, $3}' |
         while read -r so path; do
           in_list "$so" "${BASE_SONAMES[@]}" || [[ "$path" == "$bundle/"* ]] || echo "$so from $path"
         done)"
  if [[ -n "$bad" ]]; then echo "probe: loaded from outside the bundle: $bad"; rc=1; fi
  # LD_BIND_NOW: every imported function of every loaded library is resolved at start, so a stub
  # missing a symbol fails here, not in the middle of a GPU run.
  if ! LD_BIND_NOW=1 LD_LIBRARY_PATH="$ldpath" "$work/build/probe" "$csv" "$recipe" 2>&1; then
    echo "probe: the probe program failed with the bundle's libraries"; rc=1
  fi
  rm -rf "$work"
  return "$rc"
}

# --- --check mode --------------------------------------------------------------------------------
if [[ "${1:-}" == --check ]]; then
  shift
  BUNDLE="${1:?--check needs the bundle folder}"; shift
  PROBE=0
  if [[ "${1:-}" == --probe ]]; then PROBE=1; shift; fi
  [[ -d "$BUNDLE" ]] || usage "no bundle folder $BUNDLE"
  command -v readelf >/dev/null || usage "readelf not found (binutils)"
  BUNDLE="$(cd "$BUNDLE" && pwd)"
  status=0
  check_closure "$BUNDLE" "$@" || status=1
  if ((PROBE)); then probe_bundle "$BUNDLE" || status=1; fi
  exit "$status"
fi

# --- Build mode ----------------------------------------------------------------------------------
OUT="" BUILD="$REPO/build" PROBE=1
while (($#)); do
  case "$1" in
    --build-dir) BUILD="${2:?--build-dir needs a folder}"; shift 2 ;;
    --no-probe) PROBE=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    -*) usage "unknown option $1 (see --help)" ;;
    *) [[ -z "$OUT" ]] || usage "one OUT folder only"; OUT="$1"; shift ;;
  esac
done
[[ -n "$OUT" ]] || usage "usage: tools/gpu_bundle.sh OUT [--build-dir DIR] [--no-probe]  (see --help)"
for tool in apt-get apt-cache dpkg dpkg-deb readelf od gcc cmake gzip tar; do
  command -v "$tool" >/dev/null || usage "$tool not found (a Debian 12 machine with tools/setup.sh run is expected)"
done
T0=$SECONDS
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
case "$OUT" in "$REPO"|/) usage "OUT must be a folder of its own, not $OUT" ;; esac
CACHE="${ENGINE_GPU_BUNDLE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/engine-gpu-bundle}"
mkdir -p "$CACHE"
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
rm -rf "$OUT/root" "$OUT/stubs" "$OUT/data" "$OUT/libdirs.txt" "$OUT/manifest.txt" "$OUT/closure.txt"
mkdir -p "$OUT/root" "$OUT/stubs" "$OUT/data"

# 1. The -dev packages: what owns the files CMakeLists.txt's find_* calls found in a CPU build.
CACHEFILE="$BUILD/CMakeCache.txt"
if [[ ! -f "$CACHEFILE" ]]; then
  say "no $CACHEFILE: configuring a probe build in $STAGE/cpu-build"
  cmake -S "$REPO" -B "$STAGE/cpu-build" -DCMAKE_BUILD_TYPE=Release > "$STAGE/cpu-configure.log" 2>&1 ||
    { tail -n 20 "$STAGE/cpu-configure.log"; die "configure failed: run tools/setup.sh first"; }
  CACHEFILE="$STAGE/cpu-build/CMakeCache.txt"
fi
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$CACHEFILE" | head -n 1; }
owner_of() {  # file -> the package that installed it (dpkg -S), following /lib -> /usr/lib
  local f="$1" p
  p="$(dpkg -S "$f" 2>/dev/null | head -n 1 | cut -d: -f1)" || true
  if [[ -z "$p" ]]; then p="$(dpkg -S "$(readlink -f "$f")" 2>/dev/null | head -n 1 | cut -d: -f1)" || true; fi
  echo "$p"
}
declare -A DEV=()
while IFS= read -r line; do
  if [[ "$line" =~ find_package\(([A-Za-z0-9_]+) ]]; then
    name="${BASH_REMATCH[1]}"; dir="$(cache_value "${name}_DIR")"
    what=""
    for c in "$dir/${name}Config.cmake" "$dir/$(echo "$name" | tr '[:upper:]' '[:lower:]')-config.cmake"; do
      [[ -n "$dir" && -f "$c" ]] && { what="$c"; break; }
    done
    if [[ -z "$what" ]]; then  # module mode (FindZLIB): the library file it cached, e.g. ZLIB_LIBRARY_RELEASE
      what="$(sed -n "s/^${name}_[A-Z_]*LIBRARY[A-Z_]*:FILEPATH=\(\/.*\)/\1/p" "$CACHEFILE" | head -n 1)"
    fi
    [[ -n "$what" ]] || die "find_package($name): neither ${name}_DIR with a config file nor a ${name}_*LIBRARY* path in $CACHEFILE"
    pkg="$(owner_of "$what")"
  elif [[ "$line" =~ find_path\(([A-Za-z0-9_]+)[[:space:]]+([^[:space:]]+) ]]; then
    var="${BASH_REMATCH[1]}"; what="$(cache_value "$var")/${BASH_REMATCH[2]}"; pkg="$(owner_of "$what")"
  elif [[ "$line" =~ find_library\(([A-Za-z0-9_]+) ]]; then
    var="${BASH_REMATCH[1]}"; what="$(cache_value "$var")"; pkg="$(owner_of "$what")"
  else
    continue
  fi
  [[ -n "$pkg" ]] || die "no Debian package owns $what (from: $line)"
  DEV[$pkg]=1
  say "  $line  ->  $what  ->  $pkg"
done < <(cmake_find_lines)
((${#DEV[@]})) || die "found no find_* call in CMakeLists.txt"

# 2. Downloads and staging. apt answers slowly (seconds a call), so packages are staged in batches:
# one `apt-get download --print-uris` names the candidate .deb files, one `apt-get download` fetches
# those not cached, and Depends are read from the .deb files themselves (dpkg-deb -f).
declare -A ADDED=() PROVIDER=() DEB=() VERSION_OF=() UNKNOWN=()
stage_batch() {  # pkg...: unpacks each, trimmed, into $STAGE/pkgs/PKG; names apt cannot download go to UNKNOWN
  local -a todo=() fetch=()
  local p file rest line t
  for p in "$@"; do [[ -n "${DEB[$p]:-}" || -n "${UNKNOWN[$p]:-}" ]] || todo+=("$p"); done
  ((${#todo[@]})) || return 0
  local -A file_of=()
  while read -r _ file rest; do
    [[ "$file" == *.deb ]] || continue
    file_of[${file%%_*}]="$file"
    [[ -f "$CACHE/$file" ]] || fetch+=("${file%%_*}")
  done < <(apt-get download --print-uris "${todo[@]}" 2>/dev/null || true)
  if ((${#fetch[@]})); then
    (cd "$CACHE" && apt-get download -q "${fetch[@]}" 2>&1 |
       grep -v -e '^W: Download is performed unsandboxed' -e '^Get:' -e '^Fetched' >&2) || true
  fi
  for p in "${todo[@]}"; do
    file="${file_of[$p]:-}"
    if [[ -z "$file" ]]; then UNKNOWN[$p]=1; continue; fi  # a virtual package (libblas.so.3) or none
    [[ -f "$CACHE/$file" ]] || die "apt-get download $p did not bring $file (apt-get update?)"
    DEB[$p]="$CACHE/$file"
    line="${file#*_}"; line="${line%_*}"; VERSION_OF[$p]="${line//%3a/:}"
    mkdir -p "$STAGE/pkgs/$p"
    dpkg-deb -x "$CACHE/$file" "$STAGE/pkgs/$p" || die "dpkg-deb -x $file failed"
    for t in "${TRIM[@]}"; do rm -rf "${STAGE:?}/pkgs/$p/$t"; done
    find "$STAGE/pkgs/$p" -name '*.a' -type f -delete
    sonames_in "$STAGE/pkgs/$p" > "$STAGE/pkgs/$p.sonames"
  done
}
sonames_in() {  # folder: the SONAMEs of the ELF shared libraries in it
  local f s
  while IFS= read -r f; do
    s="$(soname_of "$f")"
    [[ -n "$s" ]] && echo "$s"
  done < <(elf_files "$1")
  return 0
}
depends_of() {  # pkg (staged): its Pre-Depends and Depends in order, alternatives in order, no versions
  # shellcheck disable=SC2020  # ',' and '|' both end a name
  dpkg-deb -f "${DEB[$1]}" Pre-Depends Depends | sed 's/^[A-Za-z-]*: //' | tr ',|' '\n\n' |
    sed -e 's/([^)]*)//g' -e 's/:any//' -e 's/[[:space:]]//g' | awk 'NF && !seen[$0]++'
}
add_pkg() {  # pkg (staged): into the bundle; indexes the SONAMEs it provides
  local s
  [[ -n "${ADDED[$1]:-}" ]] && return 0
  ADDED[$1]=1
  while IFS= read -r s; do PROVIDER[$s]="$1"; done < "$STAGE/pkgs/$1.sonames"
  NEXT+=("$1")
}
norm() { echo "$1" | tr '[:upper:]' '[:lower:]' | sed -e 's/\.so.*$//' -e 's/^lib//' -e 's/[^a-z0-9]//g'; }
# resolve "soname|pkg"...: for each, the Depends of pkg that ships soname, as "soname|provider" lines.
# Debian's shlibs put the provider of each DT_NEEDED among the package's own Depends; the likely
# one by name (libtiff.so.6 -> libtiff6) is tried first, then the others, each round one batch.
resolve() {
  local -a pending=("$@") first=() rest=() left=()
  local item so pkg cand key
  for item in "${pending[@]}"; do
    so="${item%%|*}"; pkg="${item#*|}"; key="$(norm "$so")"
    while IFS= read -r cand; do
      in_list "$cand" "${BASE_PACKAGES[@]}" && continue
      [[ "$cand" == *.so || "$cand" == *.so.* ]] && continue  # virtual: its real alternative comes first
      if [[ "$(norm "$cand")" == "$key"* ]]; then first+=("$cand"); else rest+=("$cand"); fi
    done < <(depends_of "$pkg")
  done
  for round in first rest; do
    if [[ $round == first ]]; then stage_batch "${first[@]}"; else stage_batch "${rest[@]}"; fi
    left=()
    for item in "${pending[@]}"; do
      so="${item%%|*}"; pkg="${item#*|}"; key="$(norm "$so")"; cand=""
      while IFS= read -r c; do
        [[ -n "${DEB[$c]:-}" ]] || continue
        if [[ $round == first ]]; then [[ "$(norm "$c")" == "$key"* ]] || continue; fi
        if grep -qxF "$so" "$STAGE/pkgs/$c.sonames"; then cand="$c"; break; fi
      done < <(depends_of "$pkg")
      if [[ -n "$cand" ]]; then echo "$so|$cand"; else left+=("$item"); fi
    done
    pending=("${left[@]}")
    ((${#pending[@]})) || return 0
  done
  for item in "${pending[@]}"; do echo "gpu_bundle.sh: ${item#*|} needs ${item%%|*} and none of its Depends ships it" >&2; done
  return 1
}

# 3. The closure: the -dev packages, their runtime packages, then whatever DT_NEEDED asks for.
NEXT=()
stage_batch "${!DEV[@]}"
for pkg in "${!DEV[@]}"; do [[ -n "${DEB[$pkg]:-}" ]] || die "apt cannot download $pkg"; done
runtime=()
for pkg in "${!DEV[@]}"; do
  add_pkg "$pkg"
  # Its runtime half (libfmt-dev -> libfmt9), even a base one (zlib1g-dev -> zlib1g): the -dev
  # package's libX.so symlink points into it. Other -dev packages it depends on are not needed.
  while IFS= read -r dep; do
    [[ "$dep" == *-dev || "$dep" == libc6 || "$dep" == *.so || "$dep" == *.so.* ]] || runtime+=("$dep")
  done < <(depends_of "$pkg")
done
stage_batch "${runtime[@]}"
for dep in "${runtime[@]}"; do [[ -n "${DEB[$dep]:-}" ]] && add_pkg "$dep"; done
declare -A STUB_USERS=() STUB_FROM=()
while ((${#NEXT[@]})); do
  scan=("${NEXT[@]}"); NEXT=()
  declare -A want=()
  for pkg in "${scan[@]}"; do
    while IFS= read -r f; do
      while IFS= read -r so; do
        [[ -n "${PROVIDER[$so]:-}" ]] && continue
        in_list "$so" "${BASE_SONAMES[@]}" && continue
        in_list "$so" "${TORCH_PATTERNS[@]}" && die "${f#"$STAGE/pkgs/"} needs torch's $so: a package that links torch cannot go in the bundle"
        if in_list "$so" "${STUBS[@]}"; then
          STUB_USERS[$so]="${STUB_USERS[$so]:-} $f"; STUB_FROM[$so]="$pkg"; continue
        fi
        want[$so]="$pkg"
      done < <(needed_of "$f")
    done < <(elf_files "$STAGE/pkgs/$pkg")
  done
  items=()
  for so in "${!want[@]}"; do items+=("$so|${want[$so]}"); done
  unset want
  ((${#items[@]})) || continue
  resolve "${items[@]}" > "$STAGE/answers" || die "the closure cannot be completed (see above)"
  while IFS='|' read -r so prov; do
    say "  ${so} -> $prov"
    add_pkg "$prov"
  done < "$STAGE/answers"
done

# 4. Into OUT/root, with the alternatives symlinks that the postinst scripts would make.
for pkg in "${!ADDED[@]}"; do
  cp -a "$STAGE/pkgs/$pkg/." "$OUT/root/"
  ctl="$STAGE/ctl/$pkg"; mkdir -p "$ctl"
  dpkg-deb -e "${DEB[$pkg]}" "$ctl"
  [[ -f "$ctl/postinst" ]] || continue
  # update-alternatives --install LINK NAME PATH PRIORITY (continuation lines joined)
  sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$ctl/postinst" | tr -s '[:blank:]' ' ' |
    grep -oE 'update-alternatives --install [^ ]+ [^ ]+ [^ ]+' | awk '{print $3, $5}' |
    while read -r link target; do
      [[ -e "$OUT/root$target" ]] || continue
      mkdir -p "$OUT/root$(dirname "$link")"
      ln -sfn "$(realpath -s -m --relative-to="$(dirname "$link")" "$target")" "$OUT/root$link"
      say "  alternative: $link -> $target ($pkg)"
    done
done
# Absolute symlinks inside packages (rare) become relative, so that they survive the carry.
while IFS= read -r -d '' l; do
  t="$(readlink "$l")"
  [[ "$t" == /* ]] || continue
  rel="${l#"$OUT/root"}"
  ln -sfn "$(realpath -s -m --relative-to="$(dirname "$rel")" "$t")" "$l"
done < <(find "$OUT/root" -type l -print0)

# 5. Stubs: every function the bundle imports from a stubbed library, defined to return 0.
for so in "${!STUB_USERS[@]}"; do
  resolve "$so|${STUB_FROM[$so]}" > "$STAGE/answers" || die "no Depends of ${STUB_FROM[$so]} ships $so (needed to stub it)"
  real_pkg="$(cut -d'|' -f2 "$STAGE/answers")"
  real=""
  while IFS= read -r f; do
    if [[ -z "$real" && "$(soname_of "$f")" == "$so" ]]; then real="$f"; fi
  done < <(elf_files "$STAGE/pkgs/$real_pkg")
  # GLOBAL FUNC definitions of the real library (WEAK ones are template copies others define too).
  readelf -W --dyn-syms "$real" | awk '$7 != "UND" && $4 == "FUNC" && $5 == "GLOBAL" {print $8}' | sed 's/@.*//' | sort -u > "$STAGE/defined"
  # shellcheck disable=SC2086  # STUB_USERS holds a space-separated list of paths
  for user in ${STUB_USERS[$so]}; do
    readelf -W --dyn-syms "$user" | awk '$7 == "UND" {print $8}'
  done | sort -u > "$STAGE/imported_raw"
  sed 's/@.*//' "$STAGE/imported_raw" | sort -u > "$STAGE/imported"
  comm -12 "$STAGE/defined" "$STAGE/imported" > "$STAGE/stubbed"
  sed 's/$/@/' "$STAGE/stubbed" > "$STAGE/stubbed_at"
  if grep -qFf "$STAGE/stubbed_at" "$STAGE/imported_raw"; then
    die "the bundle imports versioned symbols from $so: the stub generator writes no version scripts"
  fi
  {
    echo "/* Stub of $so (Debian package $real_pkg, not bundled): see tools/gpu_bundle.sh, STUBS. */"
    echo '#include <stdio.h>'
    printf 'static void called(const char* name) { fprintf(stderr, "engine gpu bundle: %%s of %s called, but the bundle has a stub in place of that library (it returns 0)\\n", name); }\n' "$so"
    while IFS= read -r sym; do
      if in_list "$sym" "${STUB_SILENT[@]}"; then echo "void* $sym(void) { return 0; }"
      else echo "void* $sym(void) { called(\"$sym\"); return 0; }"; fi
    done < "$STAGE/stubbed"
  } > "$STAGE/stub_$so.c"
  gcc -shared -fPIC -O1 -w -o "$OUT/stubs/$so" "-Wl,-soname,$so" "$STAGE/stub_$so.c"
  say "  stub: $so ($(wc -l < "$STAGE/stubbed") functions imported by$(for u in ${STUB_USERS[$so]}; do printf ' %s' "$(basename "$u")"; done))"
done

# 6. Library folders, data, manifest.
{
  for d in usr/lib/$MULTIARCH lib/$MULTIARCH usr/lib lib; do  # those holding shared libraries
    [[ -n "$(find "$OUT/root/$d" -maxdepth 1 -name 'lib*.so*' -print -quit 2>/dev/null)" ]] && echo "root/$d"
  done
  echo stubs
} > "$OUT/libdirs.txt"
mkdir -p "$OUT/data/mnist"
[[ -f "$REPO/data/mnist/train.csv" ]] || die "no data/mnist/train.csv: run datasets/fetch_mnist.sh (tools/setup.sh does)"
for f in "$REPO"/data/mnist/*.csv; do gzip -9 -n -c "$f" > "$OUT/data/mnist/$(basename "$f").gz"; done
if [[ -d "$REPO/data/digits_png/images" ]]; then
  tar -C "$REPO/data" --sort=name --owner=0 --group=0 --mtime=@0 -cf - digits_png | gzip -9 -n > "$OUT/data/digits_png.tar.gz"
fi
{
  echo "# tools/gpu_bundle.sh, $(date -u +%Y-%m-%dT%H:%M:%SZ), from $(sed -n 's/^PRETTY_NAME=//p' /etc/os-release | tr -d '"')"
  echo "packages:"
  for pkg in $(printf '%s\n' "${!ADDED[@]}" | sort); do echo "  $pkg ${VERSION_OF[$pkg]}"; done
  echo "stubs:"
  for so in $(printf '%s\n' "${!STUB_USERS[@]}" | sort); do echo "  $so ($(wc -l < "$STAGE/stub_$so.c") lines of stub C)"; done
} > "$OUT/manifest.txt"
say "${#ADDED[@]} packages: $(printf '%s\n' "${!ADDED[@]}" | sort | tr '\n' ' ')"

# 7. Proof: the closure, then the probe.
status=0
check_closure "$OUT" || status=1
if ((PROBE)) && ((status == 0)); then probe_bundle "$OUT" || status=1; fi

# 8. Size: what travels is this folder plus the working tree (tracked and untracked-not-ignored files).
bundle_bytes="$(du -sb "$OUT" | cut -f1)"
tree_bytes="$(git -C "$REPO" ls-files -z -co --exclude-standard 2>/dev/null | (cd "$REPO" && xargs -0 -r stat -c %s 2>/dev/null) | awk '{s += $1} END {print s + 0}')"
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
say "size: bundle $(mib "$bundle_bytes") (root $(mib "$(du -sb "$OUT/root" | cut -f1)"), data $(mib "$(du -sb "$OUT/data" | cut -f1)")) + working tree $(mib "$tree_bytes") = $(mib $((bundle_bytes + tree_bytes))) of the device tool's $BUDGET_MIB MiB"
echo "size: $bundle_bytes bytes (bundle) + $tree_bytes bytes (working tree)" >> "$OUT/manifest.txt"
if ((bundle_bytes + tree_bytes > BUDGET_MIB * 1048576)); then
  say "too large: trim TRIM/STUBS, or drop data/digits_png.tar.gz"; status=1
fi
say "$( ((status == 0)) && echo "bundle ready" || echo "bundle NOT usable") in $((SECONDS - T0)) s: $OUT"
exit "$status"
