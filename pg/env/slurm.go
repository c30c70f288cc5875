package env

import (
	"fmt"
	"strconv"
	"strings"
)

// Slurm master port: SlurmPortBase + job id % SlurmPortSpan, ports 10000
// to 29999, below Linux's ephemeral range (32768 and up) so that no
// outgoing connection holds it by chance.
const (
	SlurmPortBase = 10000
	SlurmPortSpan = 20000
)

// SlurmMasterPort is the store port of Slurm job jobID when MASTER_PORT
// is unset: every task computes it alike, without talking.
func SlurmMasterPort(jobID uint64) int { return SlurmPortBase + int(jobID%SlurmPortSpan) }

// inSlurmStep reports whether this process is a task of a job step that
// srun started: srun sets SLURM_STEP_ID on every task, while the batch
// script, which also sees SLURM_PROCID=0 and SLURM_NTASKS, has none.
func (r reader) inSlurmStep() bool {
	_, id := r.str("SLURM_STEP_ID")
	_, old := r.str("SLURM_STEPID")
	return id || old
}

// slurmRanks reads SLURM_PROCID and SLURM_NTASKS. set reports a Slurm
// job of several ranks: a task of an srun step of more than one task. A
// one-task step, the batch script with one task, or an allocation's
// shell is no job of several ranks (set is false): the program is the
// whole job, as without a launcher.
func (r reader) slurmRanks() (rank, size int, set bool, err error) {
	if !r.inSlurmStep() {
		p, pSet, err := r.int("SLURM_PROCID")
		if err != nil {
			return 0, 0, false, err
		}
		n, nSet, err := r.int("SLURM_NTASKS")
		if err != nil {
			return 0, 0, false, err
		}
		if pSet && nSet && n > 1 {
			return 0, 0, false, invalid(
				"SLURM_NTASKS=%d and SLURM_PROCID=%d are set but SLURM_STEP_ID is not: this is Slurm's batch script, "+
					"not one of %d tasks; start one process per task with srun (srun PROGRAM ...), "+
					"or ask Slurm for one task (--ntasks=1) for a single-machine job", n, p, n)
		}
		return 0, 0, false, nil
	}
	_, pSet := r.str("SLURM_PROCID")
	_, nSet := r.str("SLURM_NTASKS")
	switch {
	case !pSet && !nSet:
		return 0, 0, false, invalid("SLURM_STEP_ID is set but SLURM_PROCID and SLURM_NTASKS are not; srun sets all three " +
			"on every task (do not unset them)")
	case !nSet:
		return 0, 0, false, invalid("SLURM_PROCID is set but SLURM_NTASKS is not, in a task of srun (SLURM_STEP_ID is " +
			"set), which has both; do not unset it")
	case !pSet:
		return 0, 0, false, invalid("SLURM_NTASKS is set but SLURM_PROCID is not, in a task of srun (SLURM_STEP_ID is " +
			"set), which has both; do not unset it")
	}
	if rank, size, _, err = r.pair("SLURM_PROCID", "SLURM_NTASKS"); err != nil {
		return 0, 0, false, err
	}
	if size == 1 {
		return 0, 0, false, nil
	}
	return rank, size, true, nil
}

// slurm completes the Config of task rank of size from Slurm's per-task
// variables.
func (r reader) slurm(rank, size int) (Config, error) {
	c := Config{Source: SourceSlurm, Rank: rank, WorldSize: size}
	need := func(name string) (int, error) {
		n, set, err := r.int(name)
		if err != nil {
			return 0, err
		}
		if !set {
			return 0, invalid("%s is not set, but SLURM_PROCID=%d and SLURM_NTASKS=%d say this is a task of an srun step; "+
				"srun sets it on every task (do not unset it)",
				name, rank, size)
		}
		if n < 0 {
			return 0, invalid("%s=%d must not be negative", name, n)
		}
		return n, nil
	}
	local, err := need("SLURM_LOCALID")
	if err != nil {
		return Config{}, err
	}
	node, err := need("SLURM_NODEID")
	if err != nil {
		return Config{}, err
	}
	c.LocalRank, c.GroupRank = local, node
	if c.LocalWorldSize, err = r.slurmLocalSize(size, node); err != nil {
		return Config{}, err
	}
	if local >= c.LocalWorldSize {
		return Config{}, invalid("SLURM_LOCALID=%d is not below the %d tasks on node %d", local, c.LocalWorldSize, node)
	}
	return c, nil
}

// slurmLocalSize returns the number of tasks on node: its entry of
// SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE), else size spread
// evenly over the step's nodes.
func (r reader) slurmLocalSize(size, node int) (int, error) {
	for _, name := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		v, set := r.str(name)
		if !set {
			continue
		}
		counts, err := parseTasksPerNode(v)
		if err != nil {
			return 0, invalid("%s=%q: %v", name, v, err)
		}
		if node >= len(counts) {
			return 0, invalid("SLURM_NODEID=%d is not below the %d nodes of %s=%q", node, len(counts), name, v)
		}
		if n := counts[node]; n <= size {
			return n, nil
		}
		return 0, invalid("%s=%q gives node %d more tasks than SLURM_NTASKS=%d", name, v, node, size)
	}
	name, list, ok := r.slurmNodelist()
	if ok {
		hosts, err := ExpandHostlist(list)
		if err != nil {
			return 0, invalid("%s: %v", name, err)
		}
		if size%len(hosts) == 0 && node < len(hosts) {
			return size / len(hosts), nil
		}
	}
	return 0, invalid("SLURM_STEP_TASKS_PER_NODE is not set and SLURM_NTASKS=%d does not spread evenly over the step's "+
		"nodes; srun sets it on every task (do not unset it)", size)
}

// slurmNodelist returns the step's node list, or the job's.
func (r reader) slurmNodelist() (name, list string, ok bool) {
	for _, name := range []string{"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
		if v, set := r.str(name); set {
			return name, v, true
		}
	}
	return "", "", false
}

// slurmMaster returns the first host of the step's node list, where
// rank 0 runs.
func (r reader) slurmMaster() (string, error) {
	name, list, ok := r.slurmNodelist()
	if !ok {
		return "", invalid("MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST or SLURM_JOB_NODELIST to take the " +
			"first host from; set MASTER_ADDR to rank 0's host")
	}
	hosts, err := ExpandHostlist(list)
	if err != nil {
		return "", invalid("%s: %v; set MASTER_ADDR to rank 0's host", name, err)
	}
	return hosts[0], nil
}

// slurmPort returns SlurmMasterPort of SLURM_JOB_ID.
func (r reader) slurmPort() (int, error) {
	for _, name := range []string{"SLURM_JOB_ID", "SLURM_JOBID"} {
		v, set := r.str(name)
		if !set {
			continue
		}
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, invalid("%s=%q is not a job id (an integer); set MASTER_PORT", name, v)
		}
		return SlurmMasterPort(id), nil
	}
	return 0, invalid("MASTER_PORT is not set and neither is SLURM_JOB_ID to derive it from; set MASTER_PORT to a free " +
		"port on rank 0's host")
}

// parseTasksPerNode expands Slurm's tasks-per-node notation, such as
// "2(x3),1", into one count per node: 2, 2, 2, 1.
func parseTasksPerNode(s string) ([]int, error) {
	var counts []int
	for item := range strings.SplitSeq(s, ",") {
		count, times := item, "1"
		if c, rest, ok := strings.Cut(item, "(x"); ok {
			t, found := strings.CutSuffix(rest, ")")
			if !found {
				return nil, fmt.Errorf("%q: want N or N(xM)", item)
			}
			count, times = c, t
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q: want N or N(xM) with N a positive count", item)
		}
		m, err := strconv.Atoi(times)
		if err != nil || m < 1 || m > MaxHosts || len(counts)+m > MaxHosts {
			return nil, fmt.Errorf("%q: want N or N(xM) with M a positive count of at most %d nodes", item, MaxHosts)
		}
		for range m {
			counts = append(counts, n)
		}
	}
	return counts, nil
}
