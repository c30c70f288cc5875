#!/usr/bin/env python3
"""Interleaved jobs of bench/allreduce builds under mpirun, Open MPI timed in the same jobs.

    go build -tags mpi -o /tmp/ar-old ./bench/allreduce   # at the parent commit
    go build -tags mpi -o /tmp/ar-new ./bench/allreduce   # at this one
    ROUNDS=6 NP=2 OPS=allreduce,barrier SIZES=64,4096,65536 scripts/bench-vs-mpi.py /tmp/ar-old /tmp/ar-new

Each round runs every build once, in turn, so drift in the machine's load moves them alike. For each build, op
and size it prints tcp's and Open MPI's time (best and median over the rounds) and the ratio tcp/Open MPI of each
job (min, median, max): the ratio of one job compares two backends under the same load.
"""
import collections
import os
import statistics
import subprocess
import sys

builds = sys.argv[1:]
if not builds:
    sys.exit(__doc__)
rounds = int(os.environ.get('ROUNDS', '6'))
np_ = os.environ.get('NP', '2')
sizes = os.environ.get('SIZES', '64,4096')
ops = os.environ.get('OPS', 'allreduce,barrier')
res = collections.defaultdict(list)  # (build, op, bytes) -> [(mpi_us, tcp_us)]
for _ in range(rounds):
    for b in builds:
        out = subprocess.run(['timeout', '600', 'mpirun', '--allow-run-as-root', '--oversubscribe', '-np', np_, b,
                              '--backend', 'mpi', '--op', ops, '--sizes', sizes],
                             capture_output=True, text=True).stdout
        # the comparison rows: "# op,bytes,mpi_busbw,tcp_busbw,mpi/tcp,mpi_us,tcp_us"
        for line in out.splitlines():
            f = line[2:].split(',')
            if line.startswith('# ') and len(f) == 7 and f[1].isdigit():
                res[(b, f[0], int(f[1]))].append((float(f[5]), float(f[6])))
print('build op bytes | tcp_us best/median | mpi_us best/median | tcp/mpi per job min/median/max  (%d rounds, -np %s)'
      % (rounds, np_))
for k in sorted(res, key=lambda k: (k[1], k[2], k[0])):
    v = res[k]
    tcp, mpi = [x[1] for x in v], [x[0] for x in v]
    q = sorted(x[1] / x[0] for x in v)
    print('%s %s %d | %.1f %.1f | %.1f %.1f | %.2f %.2f %.2f' % (
        os.path.basename(k[0]), k[1], k[2], min(tcp), statistics.median(tcp), min(mpi), statistics.median(mpi),
        q[0], statistics.median(q), q[-1]))
