package env

import (
	"strconv"
	"strings"

	"github.com/goddp/ddp/pg"
)

// reader reads variables through a lookup function.
type reader struct{ lookup func(string) (string, bool) }

// str returns a variable's value; empty counts as unset.
func (r reader) str(name string) (string, bool) {
	v, ok := r.lookup(name)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

// int returns a variable's integer value.
func (r reader) int(name string) (n int, set bool, err error) {
	v, set := r.str(name)
	if !set {
		return 0, false, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil {
		return 0, true, invalid("%s=%q is not an integer", name, v)
	}
	return n, true, nil
}

// pair reads an index and a count that launchers set together.
func (r reader) pair(index, count string) (i, n int, set bool, err error) {
	i, iSet, err := r.int(index)
	if err != nil {
		return 0, 0, false, err
	}
	n, nSet, err := r.int(count)
	if err != nil {
		return 0, 0, false, err
	}
	switch {
	case iSet && !nSet:
		return 0, 0, false, invalid("%s is set but %s is not; launchers set both: set %s too, or unset %s", index, count,
			count, index)
	case nSet && !iSet:
		return 0, 0, false, invalid("%s is set but %s is not; launchers set both: set %s too, or unset %s", count, index,
			index, count)
	case !iSet:
		return 0, 0, false, nil
	}
	if n < 1 {
		return 0, 0, false, invalid("%s=%d must be at least 1", count, n)
	}
	if n > pg.MaxWorldSize {
		return 0, 0, false, invalid(
			"%s=%d is more than the %d ranks goddp supports (pg.MaxWorldSize); check the launcher's settings", count, n,
			pg.MaxWorldSize)
	}
	if i < 0 || i >= n {
		return 0, 0, false, invalid("%s=%d is not below %s=%d", index, i, count, n)
	}
	return i, n, true, nil
}

// ranks reads the rank variables of whichever launcher started this
// process. Launchers nest (srun starts torchrun, which starts the
// workers; mpirun runs inside a Slurm allocation), so the innermost one
// wins: torchrun's and hand-set RANK and WORLD_SIZE, then Open MPI's,
// then Slurm's. Where two of them are peers rather than nested, they must
// agree: RANK and WORLD_SIZE set by hand (no torchrun agent) must match
// Open MPI's and Slurm's.
func (r reader) ranks() (Config, error) {
	rank, size, torch, err := r.pair("RANK", "WORLD_SIZE")
	if err != nil {
		return Config{}, err
	}
	mRank, mSize, mpi, err := r.pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
	if err != nil {
		return Config{}, err
	}
	agent := r.underAgent()
	if agent && !torch {
		return Config{}, invalid("%s is set, as torchrun sets it on its workers, but RANK and WORLD_SIZE are not; torchrun "+
			"sets all of them: start the program with torchrun, or unset %s",
			r.firstSet(torchrunAgentVars), r.firstSet(torchrunAgentVars))
	}
	switch {
	case torch && !agent:
		if mpi && (rank != mRank || size != mSize) {
			return Config{}, invalid("RANK=%d and WORLD_SIZE=%d disagree with OMPI_COMM_WORLD_RANK=%d and "+
				"OMPI_COMM_WORLD_SIZE=%d; set them to Open MPI's values or unset RANK and WORLD_SIZE",
				rank, size, mRank, mSize)
		}
		if !mpi {
			// Compare with Slurm only where its own variables form a
			// job: a broken Slurm environment under explicit RANK and
			// WORLD_SIZE is not this job's concern.
			sRank, sSize, slurm, err := r.slurmRanks()
			if err == nil && slurm && (rank != sRank || size != sSize) {
				return Config{}, invalid("RANK=%d and WORLD_SIZE=%d disagree with Slurm's SLURM_PROCID=%d and SLURM_NTASKS=%d "+
					"(a RANK exported once in the batch script is the same in every task); unset RANK and WORLD_SIZE, which are "+
					"read from Slurm, or set them in each task",
					rank, size, sRank, sSize)
			}
		}
		fallthrough
	case torch:
		c := Config{Source: SourceTorchrun, Rank: rank, WorldSize: size}
		if err := r.elastic(&c); err != nil {
			return Config{}, err
		}
		return r.local(c, "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	case mpi:
		return r.local(Config{Source: SourceMPI, Rank: mRank, WorldSize: mSize}, "OMPI_COMM_WORLD_LOCAL_RANK",
			"OMPI_COMM_WORLD_LOCAL_SIZE")
	}
	sRank, sSize, slurm, err := r.slurmRanks()
	if err != nil {
		return Config{}, err
	}
	if c, set, err := r.kubeflow(); err != nil || set {
		return c, err
	}
	if slurm {
		if name := r.firstSet([]string{"LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
			"OMPI_COMM_WORLD_LOCAL_SIZE"}); name != "" {
			return Config{}, invalid("%s is set but RANK and WORLD_SIZE are not; under Slurm unset %s (SLURM_LOCALID is "+
				"read), or set RANK and WORLD_SIZE too", name, name)
		}
		return r.slurm(sRank, sSize)
	}
	if name := r.firstSet(partialVars); name != "" {
		return Config{}, invalid(
			"%s is set but no launcher variables say this process's rank: set RANK and WORLD_SIZE (torchrun, PyTorchJob), "+
				"or start it with torchrun, srun or mpirun; to run a job of one process, unset %s", name, name)
	}
	return Config{Source: SourceNone, WorldSize: 1, LocalWorldSize: 1}, nil
}

// partialVars are variables that belong to a job of several ranks; alone,
// without a rank and a world size, they are a launcher's environment cut
// short, never a job of one process.
var partialVars = []string{
	"MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE",
	"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PET_NPROC_PER_NODE",
}

// firstSet returns the first of names that is set, or "".
func (r reader) firstSet(names []string) string {
	for _, name := range names {
		if _, set := r.str(name); set {
			return name
		}
	}
	return ""
}

// local reads the machine-local pair into c; unset means one process on
// this machine.
func (r reader) local(c Config, index, count string) (Config, error) {
	i, n, set, err := r.pair(index, count)
	if err != nil {
		return Config{}, err
	}
	if !set {
		i, n = 0, 1
	}
	if n > c.WorldSize {
		return Config{}, invalid("%s=%d exceeds the world size %d", count, n, c.WorldSize)
	}
	c.LocalRank, c.LocalWorldSize = i, n
	return c, nil
}
