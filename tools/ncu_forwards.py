#!/usr/bin/env python3
"""Where a forward's GPU time goes, from ncu's per-kernel times.

Usage on the GPU machine:
  ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
      --csv --print-units base loom bench DIR --device cuda --streams 1,1 \
      --prompt 16 --gen 2 > k.csv
  python3 tools/ncu_forwards.py k.csv
Prints, per forward (a new one at each q35_embed* launch): its launches, their
total time, and the time of each kernel name, largest first; with
dram__bytes_read.sum collected, also the bytes each name read from DRAM and
the rate (GB/s) over its time. Kernels run one at a time under ncu, so the
sums are serial times, not a step's wall time.
"""
import collections
import csv
import sys


def kernels(path):
    """(name, us, bytes or None) of each profiled kernel, in launch order."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    by_id = collections.OrderedDict()
    for r in csv.DictReader(lines):
        k = by_id.setdefault(r["ID"], {"name": r["Kernel Name"]})
        v = float(r["Metric Value"].replace(",", ""))
        if r.get("Metric Name") == "gpu__time_duration.sum":
            k["us"] = v / 1000.0
        elif r.get("Metric Name") == "dram__bytes_read.sum":
            k["bytes"] = v
    return [(k["name"], k["us"], k.get("bytes")) for k in by_id.values() if "us" in k]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: ncu_forwards.py NCU_CSV")
    forwards = []
    for name, us, nb in kernels(sys.argv[1]):
        if name.startswith("q35_embed") or not forwards:
            forwards.append([])
        forwards[-1].append((name, us, nb))
    for i, f in enumerate(forwards):
        by = collections.defaultdict(lambda: [0, 0.0, 0.0])
        for name, us, nb in f:
            by[name][0] += 1
            by[name][1] += us
            by[name][2] += nb or 0.0
        total = sum(us for _, us, _ in f)
        read = sum(nb or 0.0 for _, _, nb in f)
        print("forward %d: %d launches, %.1f us, %.3f GB read" % (i, len(f), total, read / 1e9))
        for name, (n, us, nb) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            rate = "  %7.3f GB %6.0f GB/s" % (nb / 1e9, nb / us / 1e3) if nb else ""
            print("  %-28s %4d  %9.1f us  %5.1f%%%s" % (name, n, us, 100 * us / total, rate))


if __name__ == "__main__":
    main()
