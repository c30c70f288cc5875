//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The tests run as one rank each: go test -c -tags mpi, then
// mpirun -np N the binary (N = 1 runs them as an MPI singleton).
// MPI can be initialised once per process, so TestMain makes the world
// group every test uses and finalises MPI after them.

const timeoutChildEnv = "GODDP_MPI_TIMEOUT_CHILD"

type testWorld struct{ g *Group }

var tw testWorld

func TestMain(m *testing.M) {
	timeout := 2 * time.Minute
	if os.Getenv(timeoutChildEnv) != "" {
		timeout = time.Second
	}
	g, err := New(context.Background(), Options{Timeout: timeout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpi.New:", err)
		os.Exit(2)
	}
	tw.g = g
	code := m.Run()
	if err := g.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "Close:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
