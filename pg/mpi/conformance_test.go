//go:build mpi

package mpi

import (
	"os"
	"testing"

	"github.com/goddp/ddp/pg/pgtest"
)

// TestConformance runs pgtest's per-rank conformance suite on this
// process's rank of the world group: under mpirun -np N every rank runs
// it at once, each checking its own results and comparing digests of its
// AllReduce results with every other rank's through the group.
func TestConformance(t *testing.T) {
	if os.Getenv(timeoutChildEnv) != "" {
		t.Skip("not in the timeout job")
	}
	pgtest.RunRank(t, tw.g, pgtest.RankOptions{Timeout: tw.g.opts.Timeout})
}
