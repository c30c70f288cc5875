#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): vet everything, then
# run every test with the race detector, since nearly every package starts
# goroutines. Fuzz targets run their seed corpora as ordinary tests.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's PyTorch (python3-torch, 1.13) for the tests that run ddp-train
# under a real torchrun and talk to a real torch.distributed.TCPStore
# (cmd/ddp-train, pg/store); they skip, saying why, when it is missing.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: installing python3-torch for the torchrun and TCPStore tests" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >/dev/null || {
			apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >/dev/null
		} || echo "test.sh: could not install python3-torch; the torchrun and TCPStore tests will skip" >&2
	else
		echo "test.sh: /usr/bin/python3 has no torch and this is not a root shell with apt-get; the torchrun and TCPStore tests will skip (install python3-torch to run them)" >&2
	fi
fi

go vet ./...
# staticcheck at a pinned version, from the module proxy into a temporary
# GOBIN (nothing is installed on the host), with zero findings allowed.
staticcheck_version=v0.8.2 # honnef.co/go/tools 2025.x for Go 1.26
scdir=$(mktemp -d)
trap 'rm -rf "$scdir"' EXIT
if GOBIN="$scdir" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"; then
	echo "test.sh: staticcheck $staticcheck_version" >&2
	"$scdir/staticcheck" ./...
else
	echo "test.sh: could not install staticcheck $staticcheck_version from the module proxy; skipping it" >&2
fi
go test -race -timeout 30m ./...

# Open MPI (issue 11): pg/mpi, ddp-train --backend mpi and bench/allreduce
# --backend mpi build with -tags mpi and run under a real mpirun. Installed
# from Debian when missing; skipped, saying why, where that is impossible.
# Where MPI is installed, a failing MPI test fails the script.
mpi_ready() { command -v mpirun >/dev/null 2>&1 && pkg-config --exists ompi-c 2>/dev/null; }
if ! mpi_ready; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "test.sh: installing Open MPI (openmpi-bin libopenmpi-dev) for the MPI tests" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin libopenmpi-dev pkg-config >/dev/null || {
			apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y openmpi-bin libopenmpi-dev pkg-config >/dev/null
		} || echo "test.sh: could not install Open MPI" >&2
	fi
fi
if mpi_ready; then
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # containers run as root
	mpirun=(mpirun --allow-run-as-root --oversubscribe)
	go vet -tags mpi ./pg/mpi ./cmd/ddp-train ./bench/allreduce
	if [ -x "$scdir/staticcheck" ]; then
		"$scdir/staticcheck" -tags mpi ./pg/mpi ./cmd/ddp-train ./bench/allreduce
	fi
	mpidir=$(mktemp -d)
	trap 'rm -rf "$mpidir" "$scdir"' EXIT
	go test -c -tags mpi -o "$mpidir/mpi.test" ./pg/mpi
	# One rank (an MPI singleton), which also starts its own jobs to check
	# that a timeout fails the Work and MPI_Abort then ends the job: a
	# 2-rank one, and a 3-rank one per pgtest.RunRankFault case (~10 s).
	timeout 300 "$mpidir/mpi.test"
	# Every run includes pgtest.RunRank, the conformance suite with one
	# rank per process (~2, 3 and 4 s for np 2, 3 and 4 on 2 cores).
	for np in 2 3 4; do
		echo "test.sh: pg/mpi under mpirun -np $np" >&2
		timeout 300 "${mpirun[@]}" -np "$np" "$mpidir/mpi.test"
	done
	# ddp-train --backend mpi under mpirun -np 2 ends bitwise equal to --backend tcp.
	go test -tags mpi -timeout 5m -run '^TestMPI' ./cmd/ddp-train
	# bench/allreduce --backend mpi (and tcp in the same job), one small size.
	go build -tags mpi -o "$mpidir/allreduce" ./bench/allreduce
	timeout 120 "${mpirun[@]}" -np 2 "$mpidir/allreduce" --backend mpi --sizes 4096 --iters 5 >/dev/null
	# Slurm: srun --mpi=pmix -n 2 ddp-train --backend mpi ends bitwise equal to
	# --backend tcp, on a one-node Slurm the script sets up (root only).
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		go build -tags mpi -o "$mpidir/ddp-train" ./cmd/ddp-train
		rc=0
		timeout 600 bash scripts/srun-check.sh "$mpidir/ddp-train" || rc=$?
		if [ "$rc" -eq 3 ]; then
			echo "test.sh: skipping the srun --mpi=pmix check: Slurm could not be set up here" >&2
		elif [ "$rc" -ne 0 ]; then
			exit "$rc"
		fi
	else
		echo "test.sh: skipping the srun --mpi=pmix check (needs root and apt-get to set up a one-node Slurm)" >&2
	fi
else
	echo "test.sh: Open MPI is not installed (mpirun, pkg-config ompi-c) and cannot be installed here (needs root and apt-get); skipping the MPI tests (apt-get install openmpi-bin libopenmpi-dev to run them)" >&2
fi
