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
  TORCH_NCCL=$(ls /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2 2>/dev/null | head -1)
  if [ -n "$TORCH_NCCL" ]; then
    echo "== again with PyTorch's NCCL: $TORCH_NCCL"
    GODDP_NCCL_LIBRARY=$TORCH_NCCL timeout 200 ./nccl.test -test.v -test.run 'GPUVersion|GPUCollectives|AvgTailProbe|InitRankBlocking' 2>&1
    [ -x ./pgnccl.test ] && GODDP_NCCL_LIBRARY=$TORCH_NCCL timeout 200 ./pgnccl.test -test.run 'GPUConformance' 2>&1 | grep -E "^(ok|FAIL|PASS)|--- FAIL|trial.go"
  fi
  echo "== torch.distributed all_reduce (world size 1, NCCL)"
  timeout 240 "$PY" torch_allreduce.py 2>&1
  echo "torch exit $?"
} 2>&1 | tee "$LOG"
grep -E "GPU-FACT|GPU-ALGBW|TORCH-ALGBW|^(--- |ok|FAIL|PASS)" "$LOG" > "$OUT/summary.txt" || true
