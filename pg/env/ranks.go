package env

import (
	"strconv"
	"strings"
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
		return 0, 0, false, invalid("%s is set but %s is not; launchers set both", index, count)
	case nSet && !iSet:
		return 0, 0, false, invalid("%s is set but %s is not; launchers set both", count, index)
	case !iSet:
		return 0, 0, false, nil
	}
	if n < 1 {
		return 0, 0, false, invalid("%s=%d must be at least 1", count, n)
	}
	if i < 0 || i >= n {
		return 0, 0, false, invalid("%s=%d is not below %s=%d", index, i, count, n)
	}
	return i, n, true, nil
}

// ranks reads the rank variables of whichever convention is present.
func (r reader) ranks() (Config, error) {
	rank, size, torch, err := r.pair("RANK", "WORLD_SIZE")
	if err != nil {
		return Config{}, err
	}
	mRank, mSize, mpi, err := r.pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
	if err != nil {
		return Config{}, err
	}
	switch {
	case torch && mpi && (rank != mRank || size != mSize):
		return Config{}, invalid("RANK=%d and WORLD_SIZE=%d disagree with OMPI_COMM_WORLD_RANK=%d and OMPI_COMM_WORLD_SIZE=%d",
			rank, size, mRank, mSize)
	case torch:
		c := Config{Source: SourceTorchrun, Rank: rank, WorldSize: size}
		if err := r.elastic(&c); err != nil {
			return Config{}, err
		}
		return r.local(c, "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	case mpi:
		return r.local(Config{Source: SourceMPI, Rank: mRank, WorldSize: mSize}, "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	}
	for _, name := range []string{"LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"} {
		if _, set := r.str(name); set {
			return Config{}, invalid("%s is set but neither RANK and WORLD_SIZE nor OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE are", name)
		}
	}
	return Config{Source: SourceNone, WorldSize: 1, LocalWorldSize: 1}, nil
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
