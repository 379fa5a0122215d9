#!/usr/bin/env python3
"""Sums Nsight Compute's kernel durations (`ncu --metrics gpu__time_duration.sum --csv`) by
kernel name: where a decode step's device time goes when every kernel runs alone.

    python3 bench/ncu_kernels.py ncu.csv
"""
import collections
import csv
import re
import sys

SCALE = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}


def main(path):
    rows = list(csv.reader(open(path)))
    # the profiled program's own output comes first: the table starts at its header
    first = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if first is None:
        sys.exit(f"{path}: no kernel table")
    h, rows = rows[first], rows[first:]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    tot, cnt = collections.defaultdict(float), collections.Counter()
    for r in rows[1:]:
        try:
            v = float(r[vi].replace(",", "")) * SCALE.get(r[ui], 1.0)
        except ValueError:
            continue
        k = re.sub(r"\(.*", "", r[ki])[:70]  # the kernel's name without its arguments
        tot[k] += v
        cnt[k] += 1
    n, s = sum(cnt.values()), sum(tot.values())
    if n == 0:
        sys.exit(f"{path}: no kernel durations in the table")
    print(f"{n} kernels, {s:.1f} us in all, {s / n:.2f} us each on average")
    for k, v in sorted(tot.items(), key=lambda x: -x[1]):
        print(f"{v:9.1f} us {cnt[k]:5d} x {v / cnt[k]:7.2f} us  {k}")


if __name__ == "__main__":
    main(sys.argv[1])
