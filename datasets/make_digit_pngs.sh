#!/usr/bin/env bash
# Writes the real MNIST digits of data/mnist/train.csv as PNG files whose names carry their labels,
# a Pets-like flat layout for the image-file datasets (file_names, image_folder's tests):
#
#   datasets/make_digit_pngs.sh [OUT]      # default: <repo>/data/digits_png (git-ignored)
#
#   OUT/images/<label>_<row>.png           # e.g. 7_00042.png: row 42 (0-based) of train.csv, label 7
#
# 8,000 gray 28x28 PNGs, byte-identical on every machine (datasets/csv_to_png.js writes them with
# no compression library). The count and a sha256 over the sorted per-file sha256 listing are
# checked against datasets/digits_png.sha256; when OUT/images already matches, nothing is written.
# Needs node and sha256sum; calls datasets/fetch_mnist.sh first (no network when data/mnist is there).
set -euo pipefail
export LC_ALL=C  # glob and sort order of the listing

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
OUT="${1:-$REPO/data/digits_png}"
CSV="$REPO/data/mnist/train.csv"
SUMS="$HERE/digits_png.sha256"

die() { echo "make_digit_pngs.sh: error: $*" >&2; exit 1; }

for tool in node sha256sum; do
  command -v "$tool" > /dev/null || die "$tool not found"
done
[[ -f "$SUMS" ]] || die "checksum file missing: $SUMS"
want_count="$(awk '$1 == "count" { print $2 }' "$SUMS")"
want_hash="$(awk '$1 == "listing" { print $2 }' "$SUMS")"

# Prints "<count> <hash>" for the PNGs in $1/images: the hash is the sha256 of the listing
# `sha256sum images/*.png` taken in $1 (sorted names, so one line per file in a fixed order).
digest() {
  local dir="$1" n
  n="$(find "$dir/images" -maxdepth 1 -type f -name '*.png' 2> /dev/null | wc -l)"
  if ((n == 0)); then echo "0 -"; return; fi
  echo "$n $(cd "$dir" && sha256sum images/*.png | sha256sum | awk '{ print $1 }')"
}

if [[ "$(digest "$OUT")" == "$want_count $want_hash" ]]; then
  echo "make_digit_pngs.sh: $OUT/images is up to date ($want_count files, sha256 verified)"
  exit 0
fi

# The CSV comes from fetch_mnist.sh, which verifies it (and exits at once when it is in place).
"$HERE/fetch_mnist.sh" > /dev/null || die "datasets/fetch_mnist.sh failed"
[[ -f "$CSV" ]] || die "$CSV missing after fetch_mnist.sh"

# Write into a staging folder beside OUT/images and swap only when the checksums match, so a
# failure never leaves a half-written images folder behind.
mkdir -p "$OUT"
STAGE="$(mktemp -d "$OUT/.images_stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
node "$HERE/csv_to_png.js" "$CSV" "$STAGE/images" > /dev/null || die "conversion failed (datasets/csv_to_png.js)"
got="$(digest "$STAGE")"
[[ "$got" == "$want_count $want_hash" ]] ||
  die "wrote '$got' (count, listing sha256), expected '$want_count $want_hash' from $SUMS"

rm -rf "$OUT/images"
mv "$STAGE/images" "$OUT/images"
echo "make_digit_pngs.sh: wrote $want_count PNG files to $OUT/images (sha256 verified)"
