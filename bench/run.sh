#!/usr/bin/env bash
# bench/run.sh          engine vs the PyTorch-eager peer on recipes/mnist_convnext.toml
# bench/run.sh ddp      `engine launch -n 2` vs `engine run` on the same recipe and settings, and two
#                       `engine run` at once (no communication: the ceiling the machine gives 2 processes)
# bench/run.sh resnet   engine vs its PyTorch-eager peer on recipes/digits_png_resnet34_pretrain.toml
#                       (resnet34 on the 28x28 PNG digits; EPOCHS, MAX_TRAIN, MAX_VALID as below)
#
# Same machine, same settings, one after the other in one invocation; prints a table of ratios and
# writes bench/results/<date>-mnist_convnext[-ddp].md with the exact commands. Settings (env vars):
#   EPOCHS=2 MAX_TRAIN=3200 MAX_VALID=0 (0 = all 1,600) BATCH=64 THREADS=0 (0 = all cores)
#   PROCESSES=1 (the engine's accelerator.processes: 1 = one process, as the peer; 0 = the shipped
#   recipe's automatic layout, one process per core splitting BATCH)
#   REPEAT=1 (>1: alternate the two sides REPEAT times and report medians)
#   PRECISION=no (bf16: both sides in bf16 mixed precision: the engine's accelerator.mixed_precision,
#   the peer's forward passes under torch.autocast, as Accelerate's mixed_precision="bf16")
#   TAG= (appended to the report name: bench/results/<date>-mnist_convnext[-ddp][-TAG].md)
#   ENGINE=build/engine PY=/usr/bin/python3 (Debian's python3-torch, python3-opencv, python3-numpy)
# See bench/README.md for how to read the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=${1:-peer}
case "$MODE" in peer|ddp|resnet) ;; *) echo "usage: bench/run.sh [ddp|resnet]" >&2; exit 2 ;; esac
EPOCHS=${EPOCHS:-2}
MAX_TRAIN=${MAX_TRAIN:-3200}
MAX_VALID=${MAX_VALID:-0}
BATCH=${BATCH:-64}
THREADS=${THREADS:-0}
PRECISION=${PRECISION:-no}
export PRECISION
PROCESSES=${PROCESSES:-1}
export PROCESSES
REPEAT=${REPEAT:-1}
ENGINE=${ENGINE:-build/engine}
PY=${PY:-/usr/bin/python3}
RECIPE=recipes/mnist_convnext.toml NAME=mnist_convnext PEER=bench/peer_mnist_convnext.py
[ "$MODE" = resnet ] && RECIPE=recipes/digits_png_resnet34_pretrain.toml NAME=digits_png_resnet34 PEER=bench/peer_digits_resnet34.py
RUNS=build/bench-runs
export NAME
RESULTS=bench/results
STAMP=$(date +%Y-%m-%d)
mkdir -p "$RUNS" "$RESULTS"

die() { echo "bench/run.sh: $*" >&2; exit 2; }
[ -x "$ENGINE" ] || die "$ENGINE not found: build it first (tools/setup.sh, or ninja -C build engine)"
"$ENGINE" run --help >/dev/null 2>&1 || die "$ENGINE run --help failed: the engine build is not usable yet"
[ -x /usr/bin/time ] || die "/usr/bin/time missing: apt-get install -y time"
if [ "$MODE" != ddp ]; then
  "$PY" -c "import torch, cv2, numpy" 2>/dev/null ||
    die "$PY lacks torch/cv2/numpy: apt-get install -y python3-torch python3-opencv python3-numpy"
else
  if ! "$ENGINE" launch --help >/dev/null 2>&1; then
    echo "bench/run.sh ddp: skipped: '$ENGINE launch --help' fails (the launch subcommand is not built yet)"
    exit 0
  fi
fi

SIZE=${SIZE:-40}  # must match the recipe's resize; passed to both sides
SETS=(--set "train.epochs=$EPOCHS" --set "data.split.max_train=$MAX_TRAIN" --set "data.split.max_valid=$MAX_VALID"
      --set "data.batch_size=$BATCH" --set "accelerator.threads=$THREADS" --set "accelerator.processes=$PROCESSES"
      --set "accelerator.mixed_precision=$PRECISION")
# mnist_convnext resizes to SIZE (both sides); the resnet recipe trains on the PNGs' own 28x28.
[ "$MODE" = resnet ] || SETS+=(--set "data.train_transforms[1].size=[$SIZE,$SIZE]" --set "data.eval_transforms[0].size=[$SIZE,$SIZE]")
ENGINE_CMD=("$ENGINE" run "$RECIPE" "${SETS[@]}" --set "run.output_dir=$RUNS/engine")
if [ "$MODE" != ddp ]; then
  OTHER=peer
  OTHER_CMD=("$PY" "$PEER" --epochs "$EPOCHS" --max-train "$MAX_TRAIN" --max-valid "$MAX_VALID"
             --batch-size "$BATCH" --threads "$THREADS" --image-size "$SIZE" --mixed-precision "$PRECISION" --output-dir "$RUNS/peer")
else
  OTHER=engine-ddp
  OTHER_CMD=("$ENGINE" launch -n 2 "$RECIPE" "${SETS[@]}" --set "run.output_dir=$RUNS/engine-ddp")
  # The machine's own ceiling for two processes: two independent `engine run` at once, no
  # communication, each as the single process above (a VM whose second core is shared, or memory
  # bandwidth the two must split, caps 2-process scaling below 2x before DDP costs anything).
  PAIR_CMD=(bash -c '"$0" "$@" --set "run.output_dir=$PAIR_DIR/a" & a=$!
                     "$0" "$@" --set "run.output_dir=$PAIR_DIR/b"; b=$?; wait $a && exit $b' "$ENGINE" run "$RECIPE" "${SETS[@]}")
  export PAIR_DIR=$RUNS/pair
fi

# Both sides multiply through the same OpenBLAS (the peer's linear layers, the engine's BLAS
# products): the peer runs the kernel family the engine runs (engine --version), which the engine may
# have chosen over OpenBLAS's own pick or over an OPENBLAS_CORETYPE older than the CPU (a Zen 5 VM's
# image sets Haswell for every program: python3-torch would stay on it, at half the sgemm rate).
# PEER_OPENBLAS_CORETYPE=<family> chooses another; =inherit leaves the environment's.
if [ "$MODE" != ddp ] && [ "${PEER_OPENBLAS_CORETYPE:-}" != inherit ]; then
  PEER_FAMILY=${PEER_OPENBLAS_CORETYPE:-$("$ENGINE" --version 2>/dev/null | sed -n 's/^ *BLAS *OpenBLAS [0-9.]*, \([A-Za-z0-9]*\) kernels.*/\1/p')}
  [ -n "$PEER_FAMILY" ] && OTHER_CMD=(env "OPENBLAS_CORETYPE=$PEER_FAMILY" "${OTHER_CMD[@]}")
fi

# measure NAME CMD...: wall time + ru_maxrss (/usr/bin/time -v), process-tree RSS/PSS peaks
# (bench/treemem.py), load average before, stdout/stderr in $RUNS/NAME.log.
measure() {
  local name=$1; shift
  local dir=$RUNS/$name
  rm -rf "$dir"; mkdir -p "$dir"
  cut -d' ' -f1 /proc/loadavg > "$RUNS/$name.load"
  echo "== $name: $*"
  if ! "$PY" bench/treemem.py -o "$RUNS/$name.mem.json" -- /usr/bin/time -v -o "$RUNS/$name.time" "$@" > "$RUNS/$name.log" 2>&1; then
    tail -20 "$RUNS/$name.log" >&2
    die "$name failed (log: $RUNS/$name.log)"
  fi
  tail -2 "$RUNS/$name.log" | cut -c1-200
}

# collect NAME REP: one JSON line of numbers for one run, appended to $RUNS/NAME.results.
collect() {
  "$PY" - "$RUNS" "$1" <<'EOF' >> "$RUNS/$1.results"
import json, re, sys
runs, name = sys.argv[1:3]
t = open(f"{runs}/{name}.time").read()
def field(label):
    return re.search(re.escape(label) + r":\s*(.+)", t).group(1).strip()
parts = [float(x) for x in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
r = {"wall_s": wall, "cpu_s": float(field("User time (seconds)")) + float(field("System time (seconds)")),
     "maxrss_mb": int(field("Maximum resident set size (kbytes)")) / 1024,
     "load_before": float(open(f"{runs}/{name}.load").read())}
r.update(json.load(open(f"{runs}/{name}.mem.json")))
def epochs_of(d):  # an engine run directory's epoch lines
    lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl") if '"epoch"' in l]
    return [e for e in lines if e.get("type", "epoch") == "epoch"]
def accuracies_of(d):
    s = json.load(open(f"{d}/summary.json"))
    return dict(valid_accuracy=s.get("valid/accuracy"), test_accuracy=s.get("test/accuracy"))
if name == "pair":  # two runs at once: their rates add up; the accuracies are one run's (the same settings)
    last = [epochs_of(f"{runs}/pair/{d}")[-1] for d in "ab"]
    r["images_per_s"] = sum(e["images_per_s"] for e in last)
    r["eval_images_per_s"] = sum(e["eval_images_per_s"] for e in last)
    r["images_per_s_per_run"] = [round(e["images_per_s"], 2) for e in last]
    r.update(accuracies_of(f"{runs}/pair/a"))
elif name == "peer":
    j = json.loads([l for l in open(f"{runs}/{name}.log") if l.startswith("{")][-1])
    r.update(images_per_s=j["images_per_s"], eval_images_per_s=j["eval_images_per_s"], images_per_s_per_epoch=[round(v, 2) for v in j["images_per_s_per_epoch"]],
             valid_accuracy=j["valid_accuracy"], test_accuracy=j.get("test_accuracy"))
else:
    epochs = epochs_of(f"{runs}/{name}")
    r["images_per_s"] = epochs[-1]["images_per_s"]
    r["eval_images_per_s"] = epochs[-1]["eval_images_per_s"]
    r["images_per_s_per_epoch"] = [round(e["images_per_s"], 2) for e in epochs]
    r.update(accuracies_of(f"{runs}/{name}"))
print(json.dumps(r))
EOF
}

rm -f "$RUNS/engine.results" "$RUNS/$OTHER.results" "$RUNS/pair.results"
for ((i = 1; i <= REPEAT; i++)); do
  measure engine "${ENGINE_CMD[@]}"; collect engine
  measure "$OTHER" "${OTHER_CMD[@]}"; collect "$OTHER"
  if [ "$MODE" = ddp ]; then measure pair "${PAIR_CMD[@]}"; collect pair; fi
done

quote() { local out="" a; for a in "$@"; do out+="$(printf '%q' "$a") "; done; echo "${out% }"; }
SUFFIX=""; [ "$MODE" = ddp ] && SUFFIX=-ddp && export PAIR_TEXT="$(quote "$ENGINE" run "$RECIPE" "${SETS[@]}")"
REPORT=$RESULTS/$STAMP-$NAME$SUFFIX${TAG:+-$TAG}.md
"$PY" - "$RUNS" "$OTHER" "$REPORT" "$(quote "${ENGINE_CMD[@]}")" "$(quote "${OTHER_CMD[@]}")" \
  "$EPOCHS" "$MAX_TRAIN" "$MAX_VALID" "$BATCH" "$THREADS" "$REPEAT" "$MODE" <<'EOF'
import json, os, platform, statistics, subprocess, sys
runs, other, report, ecmd, ocmd, epochs, max_train, max_valid, batch, threads, repeat, mode = sys.argv[1:]
def load(name):
    rows = [json.loads(l) for l in open(f"{runs}/{name}.results")]
    med = lambda k: statistics.median(r[k] for r in rows) if isinstance(rows[0][k], (int, float)) else None
    return {k: med(k) for k in rows[0]}, rows
e, e_rows = load("engine")
o, o_rows = load(other)
ddp = other == "engine-ddp"
col = "engine launch -n 2" if ddp else "peer (PyTorch eager)"
ratio = "2-proc / 1-proc" if ddp else "engine / peer"
def sh(cmd):
    try: return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return "?"
rows = [("train images/s (last epoch)", "images_per_s", "{:.1f}"),
        ("evaluation images/s (last epoch's validation pass)", "eval_images_per_s", "{:.1f}"),
        ("wall time, s (whole command)", "wall_s", "{:.1f}"),
        ("CPU time user+sys, s", "cpu_s", "{:.1f}"),
        ("peak RSS, MiB (largest process, time -v)", "maxrss_mb", "{:.0f}"),
        ("peak PSS, MiB (whole process tree)", "peak_tree_pss_mb", "{:.0f}"),
        ("peak RSS, MiB (sum over process tree)", "peak_tree_rss_mb", "{:.0f}"),
        ("valid accuracy (best epoch)", "valid_accuracy", "{:.4f}"),
        ("test accuracy (2,000 held-out digits)", "test_accuracy", "{:.4f}"),
        ("load average before the run", "load_before", "{:.2f}")]
no_ratio = {"valid_accuracy", "test_accuracy", "load_before"}
lines = [f"| | engine run | {col} | {ratio} |", "|---|---:|---:|---:|"]
for label, k, f in rows:
    a, b = e.get(k), o.get(k)
    fa = f.format(a) if a is not None else "-"
    fb = f.format(b) if b is not None else "-"
    r = f"{a / b:.2f}" if (k not in no_ratio and a is not None and b) else ""
    if ddp and r:  # 2-proc / 1-proc: the other side over the engine
        r = f"{b / a:.2f}" if a else ""
    lines.append(f"| {label} | {fa} | {fb} | {r} |")
if ddp:  # the ceiling: two independent runs at once, their rates summed
    p, p_rows = load("pair")
    lines[0] += " 2 x engine run at once | 2 at once / 1-proc | 2-proc / 2 at once |"
    lines[1] += "---:|---:|---:|"
    for i, k in ((2, "images_per_s"), (3, "eval_images_per_s")):
        lines[i] += f" {p[k]:.1f} | {p[k] / e[k]:.2f} | {o[k] / p[k]:.2f} |"
    for i in range(4, len(lines)):
        lines[i] += " | | |"
table = "\n".join(lines)
print()
print(table)
torch_v = sh("dpkg-query -W -f '${Version}' libtorch1.13 2>/dev/null || true")
py_torch = sh("/usr/bin/python3 -c 'import torch; print(torch.__version__)'")
cpu = sh("lscpu | sed -n 's/^Model name: *//p'")
# "AMD EPYC" names several machines here (Zen 1 to Zen 4): family/model and the vector ISA tell them apart.
cpuinfo = open("/proc/cpuinfo").read()
field = lambda k: next((l.split(":", 1)[1].strip() for l in cpuinfo.splitlines() if l.split(":")[0].strip() == k), "?")
flags = field("flags").split()
isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
cpu += f", family {field('cpu family')} model {field('model')}, {' '.join(isa) or 'no AVX2'}"
rev = sh("git rev-parse --short HEAD") + (" (working tree modified)" if sh("git status --porcelain") else "")
md = [f"# {os.environ['NAME']}: {'engine launch -n 2 vs engine run' if ddp else 'engine vs PyTorch-eager peer'} ({os.path.basename(report)[:10]})",
      "",
      f"Settings: {epochs} epochs, max_train {max_train}, max_valid {max_valid or 'all'}, batch {batch}"
      f"{' per process' if ddp else ''}, threads {threads} (0 = all cores{' divided among ranks' if ddp else ''}), "
      f"engine accelerator.processes {os.environ.get('PROCESSES', '1')} (0 = automatic layout, splitting the batch), "
      f"repeat {repeat}{' (medians)' if int(repeat) > 1 else ''}, mixed precision {os.environ.get('PRECISION', 'no')}. "
      "Run one after the other, engine first.",
      "OpenMP/BLAS environment: " + (", ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
          "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "ENGINE_THREADS") if k in os.environ) or "defaults (none set)") + ".",
      f"Machine: {os.cpu_count()} cores ({cpu}), {platform.platform()}; LibTorch (Debian libtorch1.13) {torch_v}, "
      f"peer python3-torch {py_torch}; git {rev}.",
      "", table, "",
      "Ratios > 1 mean the engine side is larger (faster for images/s; slower or bigger for time and memory)."
      if not ddp else "img/s ratio > 1 means 2 processes train faster than one; global batch is 2 x per-process batch. "
      "\"2 x engine run at once\": the single-process command twice at the same time, no communication, their images/s "
      "summed: what this machine gives two processes (a ceiling for `2-proc / 1-proc`); `2-proc / 2 at once` is the "
      "share of it DDP reaches.",
      "", "Commands (from the repository root):", "", "```", " ".join(f"{k}={os.environ[k]}" for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
          "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE", "ENGINE_THREADS", "TAG") if os.environ.get(k)) +
      f" EPOCHS={epochs} MAX_TRAIN={max_train} MAX_VALID={max_valid} BATCH={batch} THREADS={threads} PROCESSES={os.environ.get('PROCESSES', '1')} PRECISION={os.environ.get('PRECISION', 'no')} REPEAT={repeat} bench/run.sh{' ' + mode if mode != 'peer' else ''}", "# which ran:",
      ecmd, ocmd] + ([f"{os.environ['PAIR_TEXT']} --set run.output_dir={os.environ['PAIR_DIR']}/{d}" + (" &" if d == "a" else "")
                      for d in "ab"] if ddp else []) + ["```", "", "Per-run numbers:", "", "```"]
md += [f"engine    {json.dumps(r)}" for r in e_rows] + [f"{other:9} {json.dumps(r)}" for r in o_rows]
md += [f"pair      {json.dumps(r)}" for r in (p_rows if ddp else [])] + ["```", ""]
open(report, "w").write("\n".join(md))
print(f"\nwritten: {report}")
EOF
