#!/usr/bin/env python3
"""Where a chain of kernels spends its time, from bench/inject/cupti_trace.c's records.

    python3 bench/kernel_timeline.py kernels.csv [--marker NAME] [--top N]

The window runs from the end of the first kernel whose name holds the marker (default
decode_advance: the last kernel of a decode step) to the end of the last one; its steps are
the markers between. Each kernel is charged with how far it moves the timeline's end (its
end past every earlier kernel's end: what it adds to the chain when kernels overlap, as
with programmatic dependent launch), split into the idle part (the GPU ran nothing) and the
busy part; also its own duration (end - start, waiting at the start included). Figures are
microseconds a step, summed by kernel name.
"""
import argparse
import collections
import csv
import re
import shutil
import subprocess


def short_names(names):
    """Demangled, argument lists cut; template arguments kept (they name the variant)."""
    names = sorted(set(names))
    out = dict(zip(names, names))
    if shutil.which("c++filt"):
        r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
        if r.returncode == 0:
            out = dict(zip(names, r.stdout.splitlines()))
    for k, v in out.items():
        v = re.sub(r"^void ", "", v)
        v = re.sub(r"\((?:[^()]|\([^()]*\))*\)$", "", v)  # the argument list
        out[k] = v.replace("__nv_bfloat16", "bf16").replace("(anonymous namespace)::", "")[:110]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--marker", default="decode_advance")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    ks = []
    with open(a.csv) as f:
        for row in csv.reader(line for line in f if not line.startswith("#")):
            if row[0] == "start_ns":
                continue
            ks.append((int(row[0]), int(row[1]), row[6], int(row[3]) * int(row[4]), int(row[5])))
    ks.sort()
    marks = [i for i, k in enumerate(ks) if a.marker in k[2]]
    if len(marks) < 2:
        raise SystemExit(f"{a.csv}: fewer than two kernels named like {a.marker}")
    steps = len(marks) - 1
    names = short_names(k[2] for k in ks)
    busy, idle, dur, cnt, shape = (collections.defaultdict(float), collections.defaultdict(float),
                                   collections.defaultdict(float), collections.Counter(), {})
    frontier = ks[marks[0]][1]
    t0 = frontier
    for s, e, n, blocks, threads in ks[marks[0] + 1: marks[-1] + 1]:
        key = names[n]
        cnt[key] += 1
        dur[key] += (e - s) / 1e3
        shape[key] = f"{blocks}x{threads}"
        if e > frontier:
            gap = max(0, s - frontier)
            idle[key] += gap / 1e3
            busy[key] += (e - frontier - gap) / 1e3
            frontier = e
    total = (frontier - t0) / 1e3
    print(f"{steps} steps, {total / steps:.1f} us a step, {sum(cnt.values()) / steps:.1f} kernels a step; "
          f"idle {sum(idle.values()) / steps:.1f} us a step")
    print(f"{'us/step added':>13} {'of it idle':>10} {'own us/step':>11} {'per step':>8} {'grid':>10}  kernel")
    for key in sorted(cnt, key=lambda k: -(busy[k] + idle[k]))[: a.top]:
        print(f"{(busy[key] + idle[key]) / steps:13.2f} {idle[key] / steps:10.2f} {dur[key] / steps:11.2f} "
              f"{cnt[key] / steps:8.2f} {shape[key]:>10}  {key}")


if __name__ == "__main__":
    main()
