#!/usr/bin/env python3
"""Reads `go test -run x -bench . -count N ./internal/gemm` output on stdin and prints the
markdown table of docs/benchmarks.md: per shape and dtype the median ns/op of internal/gemm and
of gonum (one thread), their ratio, and internal/gemm's GFLOP/s."""
import re
import statistics
import sys

LINE = re.compile(r"^BenchmarkF(32|64)/(\S+)/(ours|gonum)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op\s+([\d.]+) GFLOP/s")


def main():
    runs = {}
    order = []
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        bits, shape, who, ns, gf = m.groups()
        if shape not in order:
            order.append(shape)
        runs.setdefault((bits, shape, who), []).append((float(ns), float(gf)))
    print("| product | f32 ours ns | f32 gonum ns | f32 ours/gonum | f32 GFLOP/s "
          "| f64 ours ns | f64 gonum ns | f64 ours/gonum | f64 GFLOP/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for shape in order:
        cells = [shape]
        for bits in ("32", "64"):
            ours, ref = runs.get((bits, shape, "ours")), runs.get((bits, shape, "gonum"))
            if not ours or not ref:
                cells += ["", "", "", ""]
                continue
            o = statistics.median(x[0] for x in ours)
            g = statistics.median(x[0] for x in ref)
            gf = statistics.median(x[1] for x in ours)
            cells += [f"{o:.0f}", f"{g:.0f}", f"{o / g:.3f}", f"{gf:.1f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
