#!/usr/bin/python3
# bench/treemem.py -o mem.json -- COMMAND [ARGS]...
#
# Runs COMMAND and samples, every --interval seconds, the memory of its whole process tree: the
# sum of RSS and of PSS (/proc/PID/smaps_rollup) over COMMAND and all its descendants. Writes the
# peaks as JSON and exits with COMMAND's exit status.
#
# Why: `/usr/bin/time -v` reports the largest *single* process of a tree (ru_maxrss), which
# undercounts the PyTorch peer (main process + DataLoader worker processes) and `engine launch -n 2`
# (one process per rank), while the engine's `run` is one process with loader threads. PSS splits
# shared pages (libtorch, copy-on-write data) among the processes that map them, so its sum is the
# fair "memory of the job"; the RSS sum double-counts shared pages and is an upper bound.
#
# The sampler must not slow what it measures: a sample (a scan of /proc and each process's
# smaps_rollup) costs ~5-10 ms of CPU, which under `engine launch -n 2` on 2 cores comes out of a
# rank (and, through the step's barriers, out of both): every 0.25 s it cost the DDP side ~3.5% of its
# train img/s (2026-12-04, bench/RESULTS.md). So it samples once a second (memory peaks here are
# plateaus lasting seconds) at the lowest CPU priority.
import argparse
import json
import os
import subprocess
import sys
import time


def children_of():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(root):
    kids, out, todo = children_of(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rollup_kib(pid):
    vals = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("Rss", "Pss"):
                    vals[k] = int(rest.split()[0])
    except (OSError, ValueError):
        pass
    return vals.get("Rss", 0), vals.get("Pss", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        sys.exit("treemem.py: no command (usage: treemem.py -o mem.json -- COMMAND ...)")
    proc = subprocess.Popen(cmd)
    os.nice(19)  # after the fork: COMMAND keeps the caller's priority
    peak_rss = peak_pss = peak_procs = 0
    while proc.poll() is None:
        pids = tree(proc.pid)
        rss = pss = 0
        for p in pids:
            r, s = rollup_kib(p)
            rss, pss = rss + r, pss + s
        peak_rss, peak_pss, peak_procs = max(peak_rss, rss), max(peak_pss, pss), max(peak_procs, len(pids))
        time.sleep(a.interval)
    with open(a.output, "w") as f:
        json.dump({"peak_tree_rss_mb": peak_rss / 1024, "peak_tree_pss_mb": peak_pss / 1024,
                   "max_processes": peak_procs, "interval_s": a.interval}, f)
        f.write("\n")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
