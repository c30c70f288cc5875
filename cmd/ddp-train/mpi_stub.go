//go:build !mpi

package main

import (
	"context"
	"errors"
	"io"
)

// runMPI refuses: this binary was built without MPI.
func runMPI(context.Context, config, io.Writer, io.Writer) error {
	return usageError{errors.New("--backend mpi: this ddp-train was built without MPI; rebuild it with `go build -tags " +
		"mpi ./cmd/ddp-train` (needs libopenmpi-dev) and start it with mpirun")}
}
