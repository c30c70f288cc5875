//go:build mpi

package dist

import (
	"context"
	"fmt"

	"github.com/goddp/ddp/pg/env"
	"github.com/goddp/ddp/pg/mpi"
)

// mpiBuilt reports whether this binary has the mpi backend (-tags mpi).
const mpiBuilt = true

// joinMPI makes the MPI group: rank and size come from MPI itself (mpirun,
// or srun --mpi=pmix). The ranks need no store to meet, but get one,
// hosted by rank 0 and found over MPI, for wrappers that keep state in
// it (mpi.NewStore).
func joinMPI(ctx context.Context, o Options) (*Group, error) {
	mg, err := mpi.New(ctx, mpi.Options{Timeout: o.Timeout, AbortGrace: o.MPIAbortGrace, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("%w: mpi: %v (start the program with mpirun -np N or srun --mpi=pmix)", ErrBackendUnavailable,
			err)
	}
	st, err := mpi.NewStore(ctx, mg, mpi.StoreOptions{Timeout: o.Timeout, Logger: o.Logger})
	if err != nil {
		mg.Close()
		return nil, err
	}
	return &Group{ProcessGroup: mg, env: env.Config{Rank: mg.Rank(), WorldSize: mg.Size(), Source: env.SourceMPI},
		store: st, storeHost: 0, closer: st}, nil
}
