#!/usr/bin/env bash
# Runs the NCCL tests on a GPU machine and writes everything to $OUT
# (default ./gpu-out): gpu-log.txt has the whole log, the GPU-FACT and
# GPU-ALGBW lines are the figures.
set -uo pipefail
cd "$(dirname "$0")"
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
LOG=$OUT/gpu-log.txt
PY=${PY:-/opt/torch/.venv/bin/python}
{
  echo "== date"; date -u
  echo "== nvidia-smi"; nvidia-smi || true
  echo "== uname"; uname -a
  echo "== libraries"
  ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null
  ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null
  ldconfig -p | grep -E "libcuda.so|libnccl" || true
  echo "== torch"
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version(), "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))' 2>&1 || true
  echo "== nccl.test"
  timeout 300 ./nccl.test -test.v -test.timeout 280s -nccl.bench 2>&1
  echo "nccl.test exit $?"
  if [ -x ./pgnccl.test ]; then
    echo "== pgnccl.test"
    timeout 300 ./pgnccl.test -test.v -test.timeout 280s 2>&1
    echo "pgnccl.test exit $?"
  fi
  if [ -x ./pgnccl.test ]; then
    echo "== device buckets: registration policy, upload/seal/allreduce/download (issue 14)"
    timeout 200 ./pgnccl.test -test.v -test.run 'GPUDeviceBucket' 2>&1
    echo "== device buckets: registration cost and registered vs unregistered allreduce, 1 MiB - 1 GiB"
    timeout 500 ./pgnccl.test -test.run '^$' -test.bench 'GPUBucket' -test.benchtime 20x 2>&1 | tee "$OUT/bucket-bench.txt"
    # GPU-REG lines: for each benchmark and size, registered ns/op over unregistered ns/op.
    awk '/^BenchmarkGPUBucket/ { split($1, p, "/"); key = p[1] "/" p[2]; reg = (p[3] ~ /registered=true/);
         ns[key, reg] = $3 } END { for (k in ns) { split(k, q, SUBSEP); if (q[2] == 1 && ((q[1], 0) in ns))
         printf "GPU-REG %s registered/unregistered time ratio %.3f\n", q[1], ns[q[1], 1] / ns[q[1], 0] } }' "$OUT/bucket-bench.txt" | sort
  fi
  if [ -x ./ddp.test ]; then
    echo "== DDP world size 1 on NCCL (device buckets) vs pg/local, bitwise; reducer timeline in \$OUT"
    GODDP_GPU_OUT=$OUT timeout 300 ./ddp.test -test.v -test.run 'GPUDDPOnNCCL' 2>&1
    if command -v nsys >/dev/null; then
      echo "== nsys timeline of the same run (copy stream vs backward)"
      timeout 300 nsys profile --trace=cuda,osrt --force-overwrite=true -o "$OUT/ddp-nccl" ./ddp.test -test.run 'GPUDDPOnNCCL' 2>&1 | tail -5
    else
      echo "nsys not installed: only the reducer timeline ($OUT/timeline-nccl.json) shows the copies"
    fi
  fi
  if command -v go >/dev/null && [ -f ../go.mod ] && { [ -f /usr/local/cuda/include/cuda.h ] || [ -f /usr/include/cuda.h ]; }; then
    echo "== Gorgonia v0.9.18 with -tags cuda (docs/nccl.md, Gorgonia's CUDA)"
    (cd .. && CGO_ENABLED=1 go build -tags cuda -o /dev/null gorgonia.org/gorgonia 2>&1 | head -40); echo "gorgonia cuda build exit $?"
  fi
  TORCH_NCCL=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
  if [ -n "$TORCH_NCCL" ]; then
    echo "== again with PyTorch's NCCL: $TORCH_NCCL"
    GODDP_NCCL_LIBRARY=$TORCH_NCCL timeout 200 ./nccl.test -test.v -test.run 'GPUVersion|GPUCollectives|AvgTailProbe|InitRankBlocking' 2>&1
    [ -x ./pgnccl.test ] && GODDP_NCCL_LIBRARY=$TORCH_NCCL timeout 200 ./pgnccl.test -test.v -test.run 'GPUDeviceBucket' 2>&1 | grep GPU-FACT
    [ -x ./pgnccl.test ] && GODDP_NCCL_LIBRARY=$TORCH_NCCL timeout 200 ./pgnccl.test -test.run 'GPUConformance' 2>&1 | grep -E "^(ok|FAIL|PASS)|--- FAIL|trial.go"
  fi
  echo "== torch.distributed all_reduce (world size 1, NCCL)"
  timeout 240 "$PY" torch_allreduce.py 2>&1
  echo "torch exit $?"
} 2>&1 | tee "$LOG"
grep -E "GPU-FACT|GPU-ALGBW|GPU-REG|TORCH-ALGBW|^(--- |ok|FAIL|PASS)" "$LOG" > "$OUT/summary.txt" || true
