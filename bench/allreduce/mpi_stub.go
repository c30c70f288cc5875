//go:build !mpi

package main

import (
	"context"
	"errors"
	"io"

	"github.com/goddp/ddp/internal/cli"
)

// runMPI refuses: this binary was built without MPI.
func runMPI(context.Context, options, io.Writer) error {
	return cli.Usage(errors.New("--backend mpi: built without MPI; rebuild with `go build -tags mpi ./bench/allreduce` " +
		"and start it with mpirun -np N"))
}
