#!/usr/bin/env python3
"""Interleaved ddp-train runs of several builds on the same data: what a step costs, build against build.

    git stash; go build -o /tmp/ddp-old ./cmd/ddp-train; git stash pop   # or at the parent commit
    go build -o /tmp/ddp-new ./cmd/ddp-train
    ROUNDS=5 ARGS="--nproc 1 --steps 1500 --optimizer adam --lr 0.001" \\
        scripts/bench-step.py /tmp/ddp-old /tmp/ddp-new -- --data train-images-idx3-ubyte --labels train-labels-idx1-ubyte

Each round runs every build once, in turn, so drift in the machine's load moves them alike. For each build it
prints the median over the rounds of the samples/s of ddp-train's last "train" line and of the CPU seconds (user +
system, all of the run's processes, start-up included), and each median's ratio to the first build's: on a
shared machine the CPU seconds are the steadier figure, the samples/s the one a user sees.
"""
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys

args = sys.argv[1:]
extra = []
if '--' in args:
    args, extra = args[:args.index('--')], args[args.index('--') + 1:]
builds = args
if not builds:
    sys.exit(__doc__)
rounds = int(os.environ.get('ROUNDS', '5'))
common = shlex.split(os.environ.get('ARGS', '--nproc 1 --steps 1500 --optimizer adam --lr 0.001')) + extra
res = {b: [] for b in builds}  # build -> [(samples/s, CPU s)]
for _ in range(rounds):
    for b in builds:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(['timeout', '600', b, '--log-every', '1000000'] + common,
                             capture_output=True, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        found = re.findall(r'"samples_per_sec": ([0-9.]+)', out.stdout + out.stderr)
        if out.returncode != 0 or not found:
            sys.exit('%s failed (exit %d):\n%s' % (b, out.returncode, out.stderr[-2000:]))
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        res[b].append((float(found[-1]), cpu))
base = None
for b in builds:
    sps = statistics.median(r[0] for r in res[b])
    cpu = statistics.median(r[1] for r in res[b])
    if base is None:
        base = (sps, cpu)
    print('%-30s samples/s %9.0f (x%.2f)   CPU s %7.2f (x%.2f less)' % (b, sps, sps / base[0], cpu, base[1] / cpu))
