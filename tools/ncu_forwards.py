#!/usr/bin/env python3
"""Where a forward's GPU time goes, from ncu's per-kernel times.

Usage on the GPU machine:
  ncu --clock-control none --metrics gpu__time_duration.sum --csv \
      --print-units base loom bench DIR --device cuda --streams 1,1 \
      --prompt 16 --gen 2 > k.csv
  python3 tools/ncu_forwards.py k.csv
Prints, per forward (a new one at each q35_embed* launch): its launches, their
total time, and the time of each kernel name, largest first. Kernels run one
at a time under ncu, so the sums are serial times, not a step's wall time.
"""
import collections
import csv
import sys


def kernels(path):
    """(name, us) of each profiled kernel, in launch order."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    out = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") == "gpu__time_duration.sum":
            ns = float(r["Metric Value"].replace(",", ""))
            out.append((r["Kernel Name"], ns / 1000.0))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_forwards.py NCU_CSV")
    forwards = []
    for name, us in kernels(sys.argv[1]):
        if name.startswith("q35_embed") or not forwards:
            forwards.append([])
        forwards[-1].append((name, us))
    for i, f in enumerate(forwards):
        by = collections.defaultdict(lambda: [0, 0.0])
        for name, us in f:
            by[name][0] += 1
            by[name][1] += us
        total = sum(us for _, us in f)
        print("forward %d: %d launches, %.1f us" % (i, len(f), total))
        for name, (n, us) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            print("  %-28s %4d  %9.1f us  %5.1f%%" % (name, n, us, 100 * us / total))


if __name__ == "__main__":
    main()
