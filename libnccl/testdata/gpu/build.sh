#!/usr/bin/env bash
# Builds the GPU test binaries into .gpu/ (ignored by git) beside run.sh,
# ready to be copied to a GPU machine that has no Go toolchain.
set -euo pipefail
cd "$(dirname "$0")/../../.."
mkdir -p .gpu
CGO_ENABLED=0 go test -c -o .gpu/nccl.test ./libnccl
if [ -d pg/nccl ]; then CGO_ENABLED=0 go test -c -o .gpu/pgnccl.test ./pg/nccl; fi
CGO_ENABLED=0 go test -c -o .gpu/ddp.test ./tests/gpu # DDP on NCCL with device buckets (tests/gpu)
cp libnccl/testdata/gpu/run.sh libnccl/testdata/gpu/torch_allreduce.py .gpu/
chmod +x .gpu/run.sh .gpu/*.test
ls -la .gpu
