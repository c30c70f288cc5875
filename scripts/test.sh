#!/usr/bin/env bash
# The project's one test command (README.md, .ci/run): vet and staticcheck
# everything, then run every test with the race detector, since nearly
# every package starts goroutines. Fuzz targets run their seed corpora as
# ordinary tests.
#
# It changes nothing on the machine unless asked: installing Debian
# packages (python3-torch, Open MPI, Slurm and munge) and starting the
# daemons of a one-node Slurm happen only when CI=true or
# GODDP_TEST_INSTALL=1 (and as root with apt-get). Otherwise the tests that
# need what is missing skip, each with one line saying what to install.
# Every daemon it starts is stopped on exit. It prints one line per stage
# with its time.
set -euo pipefail
cd "$(dirname "$0")/.."

install=0
if [ "${CI:-}" = true ] || [ "${GODDP_TEST_INSTALL:-0}" = 1 ]; then
	if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
		install=1
	else
		echo "test.sh: asked to install test dependencies, but this is not a root shell with apt-get; what is missing will skip" >&2
	fi
fi
export GODDP_TEST_INSTALL=$install # scripts/srun-check.sh reads it

# stage NAME COMMAND...: runs COMMAND, prints its time, and returns its
# status. COMMAND runs where set -e is ignored (bash ignores it inside
# a function called from ||), so the functions below check each step.
stage() {
	local name=$1 start=$SECONDS rc=0
	shift
	echo "test.sh: $name ..." >&2
	"$@" || rc=$?
	if [ "$rc" -eq 0 ]; then
		echo "test.sh: $name: done in $((SECONDS - start)) s" >&2
	else
		echo "test.sh: $name: FAILED (exit $rc) after $((SECONDS - start)) s" >&2
	fi
	return "$rc"
}

# apt_install PKG...: installs Debian packages, only when allowed.
apt_install() {
	[ "$install" = 1 ] || return 1
	DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >/dev/null || {
		apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >/dev/null
	}
}

# Debian's PyTorch (python3-torch, 1.13) for the tests that run ddp-train
# under a real torchrun and talk to a real torch.distributed.TCPStore
# (cmd/ddp-train, pg/store); they skip, saying why, when it is missing.
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
	if ! stage "installing python3-torch" apt_install python3-torch; then
		echo "test.sh: no torch in /usr/bin/python3; the torchrun and TCPStore tests will skip (apt-get install python3-torch, or run with GODDP_TEST_INSTALL=1 as root)" >&2
	fi
fi

stage "go vet" go vet ./...
# staticcheck at a pinned version, from the module proxy into a temporary
# GOBIN (nothing is installed on the host), with zero findings allowed.
staticcheck_version=v0.8.2 # honnef.co/go/tools 2025.x for Go 1.26
scdir=$(mktemp -d)
mpidir=$(mktemp -d)
trap 'rm -rf "$scdir" "$mpidir"' EXIT
if GOBIN="$scdir" go install "honnef.co/go/tools/cmd/staticcheck@$staticcheck_version"; then
	stage "staticcheck $staticcheck_version" "$scdir/staticcheck" ./...
else
	echo "test.sh: could not install staticcheck $staticcheck_version from the module proxy; skipping it" >&2
fi
stage "go test -race ./..." go test -race -timeout 30m ./...
# The cgroup memory proof of --zero (issue 38) measures real peaks, which
# the race detector's shadow memory would swamp, so it skips under -race
# and runs here on its own (root with a writable cgroup v1 memory
# controller; it skips, saying why, elsewhere).
stage "ZeRO in a cgroup memory limit (TestZeroFitsCgroup, without -race)" \
	go test -count=1 -timeout 5m -run '^TestZeroFitsCgroup$' ./cmd/ddp-train/

# Hosts as network namespaces on this machine (internal/netbed):
# multi-host launches, shared memory per namespace, faults between hosts.
# Root only; iproute2 is installed when allowed. The packages below hold
# every TestNetbed test. It runs after the MPI stages (its mpirun test
# needs Open MPI installed), or alone where MPI is missing.
netbed_pkgs=(./pg/tcp/ ./cmd/ddp-train/ ./bench/scale/)
netbed_tests() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "test.sh: skipping the network-namespace tests (they need root)" >&2
		return 0
	fi
	if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
		apt_install iproute2 || {
			echo "test.sh: skipping the network-namespace tests: iproute2 is not installed (apt-get install iproute2, or run with GODDP_TEST_INSTALL=1 as root)" >&2
			return 0
		}
	fi
	GODDP_TEST_NETBED=1 go test -count=1 -timeout 30m -run '^TestNetbed' "${netbed_pkgs[@]}" || return
	# mpirun --backend mpi across the bed's hosts needs a -tags mpi build.
	if mpi_ready; then
		GODDP_TEST_NETBED=1 go test -tags mpi -count=1 -timeout 10m -run '^TestNetbedMpirunMPI' ./cmd/ddp-train/ || return
	fi
}
netbed_tests_stage() { stage "network-namespace tests (TestNetbed)" netbed_tests; }

# Open MPI (issue 11): pg/mpi, ddp-train --backend mpi and bench/allreduce
# --backend mpi build with -tags mpi and run under a real mpirun. Where MPI
# is installed, a failing MPI test fails the script.
mpi_ready() { command -v mpirun >/dev/null 2>&1 && pkg-config --exists ompi-c 2>/dev/null; }
if ! mpi_ready; then
	stage "installing Open MPI" apt_install openmpi-bin libopenmpi-dev pkg-config || true
fi
if ! mpi_ready; then
	echo "test.sh: skipping the MPI tests: Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev pkg-config, or run with GODDP_TEST_INSTALL=1 as root)" >&2
	netbed_tests_stage
	exit 0
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # containers run as root
mpirun=(mpirun --allow-run-as-root --oversubscribe)
mpi_static() {
	go vet -tags mpi ./pg/mpi ./dist ./cmd/ddp-train ./bench/allreduce || return
	if [ -x "$scdir/staticcheck" ]; then
		"$scdir/staticcheck" -tags mpi ./pg/mpi ./dist ./cmd/ddp-train ./bench/allreduce || return
	fi
}
stage "go vet and staticcheck -tags mpi" mpi_static
mpi_tests() {
	go test -c -tags mpi -o "$mpidir/mpi.test" ./pg/mpi || return
	# One rank (an MPI singleton), which also starts its own jobs to check
	# that a timeout fails the Work and MPI_Abort then ends the job: a
	# 2-rank one, and a 3-rank one per pgtest.RunRankFault case (~10 s).
	timeout 300 "$mpidir/mpi.test" || return
	# Every run includes pgtest.RunRank, the conformance suite with one
	# rank per process (~2, 3 and 4 s for np 2, 3 and 4 on 2 cores).
	for np in 2 3 4; do
		echo "test.sh: pg/mpi under mpirun -np $np" >&2
		timeout 300 "${mpirun[@]}" -np "$np" "$mpidir/mpi.test" || return
	done
	# ddp-train --backend mpi under mpirun -np 2 ends bitwise equal to --backend tcp.
	go test -tags mpi -timeout 5m -run '^TestMPI' ./cmd/ddp-train || return
	# bench/allreduce --backend mpi (and tcp in the same job), one small size.
	go build -tags mpi -o "$mpidir/allreduce" ./bench/allreduce || return
	timeout 120 "${mpirun[@]}" -np 2 "$mpidir/allreduce" --backend mpi --sizes 4096 --iters 5 >/dev/null
}
stage "MPI tests under mpirun -np 1-4" mpi_tests

netbed_tests_stage

# Slurm: srun --mpi=pmix -n 2 ddp-train --backend mpi ends bitwise equal to
# --backend tcp, on a one-node Slurm set up in a temporary directory (root
# only; packages and the munge key only when installing is allowed).
if [ "$(id -u)" -ne 0 ]; then
	echo "test.sh: skipping the srun --mpi=pmix check (needs root to start a one-node Slurm)" >&2
	exit 0
fi
go build -tags mpi -o "$mpidir/ddp-train" ./cmd/ddp-train
rc=0
stage "srun --mpi=pmix -n 2 check" timeout 600 bash scripts/srun-check.sh "$mpidir/ddp-train" || rc=$?
if [ "$rc" -eq 3 ]; then
	echo "test.sh: skipping the srun --mpi=pmix check: Slurm could not be set up here (see the line above)" >&2
elif [ "$rc" -ne 0 ]; then
	exit "$rc"
fi
