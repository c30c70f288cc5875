#!/usr/bin/env bash
# Issue 11's Slurm proof, run by scripts/test.sh (MPI section) as root:
# a one-node Slurm (Debian's slurm-wlm and munge, configured in a temporary
# directory through SLURM_CONF, with a private munged whose key and socket
# live there too; installed only with GODDP_TEST_INSTALL=1) runs `srun --mpi=pmix -n 2 ddp-train
# --backend mpi`, which must end with bitwise the parameters of
# `ddp-train --backend tcp` on the same flags, with each engine (--engine
# gorgonia and gomlx). Exit 0 ok, 1 mismatch or
# failure, 3 Slurm could not be set up here (the caller skips, saying so).
set -euo pipefail
bin=${1:?usage: srun-check.sh path/to/ddp-train-built-with-tags-mpi}
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true # the daemons exit before their directory goes
	rm -rf "$dir"
}
trap cleanup EXIT
setup_fail() { echo "srun-check: $*" >&2; exit 3; }

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
	[ "${GODDP_TEST_INSTALL:-0}" = 1 ] || setup_fail "slurm-wlm and munge are not installed (apt-get install slurm-wlm munge, or run scripts/test.sh with GODDP_TEST_INSTALL=1)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >/dev/null 2>&1 ||
		{ apt-get update >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm munge >/dev/null 2>&1; } ||
		setup_fail "could not install slurm-wlm and munge"
fi
# A private munged: its key and socket live in $dir, so nothing under /etc
# or /run changes and the daemon stops with the check (the cleanup above).
mungekey -c -k "$dir/munge.key" >/dev/null 2>&1 || setup_fail "mungekey could not create a key"
munged -F --force --key-file="$dir/munge.key" --socket="$dir/munge.sock" --pid-file="$dir/munged.pid" \
	--log-file="$dir/munged.log" --seed-file="$dir/munged.seed" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -S "$dir/munge.sock" ] && break; sleep 0.1; done
[ -S "$dir/munge.sock" ] || setup_fail "munged did not start ($(tail -2 "$dir/munged.log" 2>/dev/null | tr '\n' ' '))"

host=$(hostname -s)
cpus=$(nproc)
mkdir -p "$dir/ctld" "$dir/d"
cat >"$dir/slurm.conf" <<CONF
ClusterName=goddpci
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/ctld.pid
SlurmdPidFile=$dir/d.pid
SlurmctldLogFile=$dir/ctld.log
SlurmdLogFile=$dir/d.log
MpiDefault=none
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i >/dev/null 2>&1 & pids+=($!)
slurmd -D >/dev/null 2>&1 & pids+=($!)
for _ in $(seq 60); do
	sinfo -h -o %t 2>/dev/null | grep -qx idle && break
	sleep 1
done
sinfo -h -o %t 2>/dev/null | grep -qx idle || setup_fail "the one-node Slurm did not come up ($(tail -3 "$dir/ctld.log" "$dir/d.log" 2>/dev/null | tr '\n' ' '))"
srun --mpi=list 2>&1 | grep -q pmix || setup_fail "this Slurm has no pmix plugin"

flags=(--steps 20 --hidden 16 --samples 512 --batch-size 16 --log-format json)
digests() { grep -o '"param_digest":"[0-9a-f]*"' | sort -u; }
# Both engines take the same MPI path (the reducer over pg/mpi); --engine
# gomlx also with its own flags (per-rank dropout, bfloat16 gradients).
for engine in gorgonia gomlx "gomlx --dropout 0.2 --mixed-precision bfloat16 --optimizer adamw"; do
	read -r -a e <<< "--engine $engine"
	want=$("$bin" "${e[@]}" --nproc 2 "${flags[@]}" 2>&1 | digests)
	got=$(cd "$dir" && timeout 120 srun --mpi=pmix -n 2 --oversubscribe "$bin" "${e[@]}" --backend mpi "${flags[@]}" 2>&1 | digests)
	if [ -z "$want" ] || [ "$got" != "$want" ]; then
		echo "srun-check: srun --mpi=pmix -n 2 ddp-train --engine $engine --backend mpi ended with $got, --backend tcp with $want" >&2
		exit 1
	fi
	echo "srun-check: srun --mpi=pmix -n 2 ddp-train --engine $engine --backend mpi == --backend tcp ($got)" >&2
done
