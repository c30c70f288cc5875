//go:build mpi

package mpi

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/pgtest"
)

// faultChildEnv names the pgtest.RunRankFault case a fault job runs.
const faultChildEnv = "GODDP_MPI_FAULT_CHILD"

// TestRankFaultsAbortTheJob runs each of pgtest's per-rank fault cases in
// a 3-rank job of its own under mpirun (group timeout 1s): the ranks that
// wait must each get pg.ErrTimeout (pgtest checks it and they print
// FAULT-OK), and then MPI_Abort must end the whole job, the ranks that
// stayed away included, long before their 60s sleep ends. Each case needs
// its own job because the timeout ends it.
func TestRankFaultsAbortTheJob(t *testing.T) {
	// The ranks that wait in each case: they must report the timeout.
	waiting := map[string]int{"NoShow": 2, "Subgroup/Timeout": 2, "Recv/NoSender": 1}
	for _, name := range pgtest.RankFaults() {
		t.Run(name, func(t *testing.T) {
			out := abortedJob(t, 3, "^TestRankFaultChild$", timeoutChildEnv+"=1", faultChildEnv+"="+name)
			if got, want := strings.Count(out, "FAULT-OK"), waiting[name]; got != want {
				t.Fatalf("%d ranks reported the timeout as pgtest wants it, want %d:\n%s", got, want, out)
			}
		})
	}
}

// TestRankFaultChild is every rank of the jobs above.
func TestRankFaultChild(t *testing.T) {
	name := os.Getenv(faultChildEnv)
	if name == "" {
		t.Skip("only in the jobs TestRankFaultsAbortTheJob starts")
	}
	g := tw.g
	start := time.Now()
	pgtest.RunRankFault(t, g, name, pgtest.RankOptions{Timeout: g.opts.Timeout})
	if !t.Failed() && time.Since(start) < 2*time.Second { // a waiting rank, not one that stayed away
		fmt.Printf("FAULT-OK rank %d: %s\n", g.Rank(), name)
	}
	time.Sleep(60 * time.Second) // MPI_Abort ends the job first
}
