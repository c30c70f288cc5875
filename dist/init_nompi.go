//go:build !mpi

package dist

import (
	"context"
	"fmt"
)

// mpiBuilt reports whether this binary has the mpi backend (-tags mpi).
const mpiBuilt = false

func joinMPI(context.Context, Options) (*Group, error) {
	return nil, fmt.Errorf("%w: mpi: this binary was built without MPI; build it with go build -tags mpi (needs Open "+
		"MPI's libopenmpi-dev), or use Backend \"tcp\"", ErrBackendUnavailable)
}
