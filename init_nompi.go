//go:build !mpi

package ddp

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg/env"
)

// mpiBuilt reports whether this binary has the mpi backend (-tags mpi).
const mpiBuilt = false

func joinMPI(context.Context, env.Config, InitOptions) (*Group, error) {
	return nil, fmt.Errorf("%w: mpi: this binary was built without MPI; build it with go build -tags mpi (needs Open MPI's libopenmpi-dev), or use Backend \"tcp\"", ErrBackendUnavailable)
}
