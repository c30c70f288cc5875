//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	if os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMIX_RANK") != "" {
		t.Skip("runs jobs of its own; run the binary without mpirun to include it")
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("mpirun not found")
	}
	if testing.Short() {
		t.Skip("starts MPI jobs")
	}
	// The ranks that wait in each case: they must report the timeout.
	waiting := map[string]int{"NoShow": 2, "Subgroup/Timeout": 2, "Recv/NoSender": 1}
	for _, name := range pgtest.RankFaults() {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "3", os.Args[0], "-test.run", "^TestRankFaultChild$", "-test.v")
			cmd.Env = append(os.Environ(), timeoutChildEnv+"=1", faultChildEnv+"="+name)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			took := time.Since(start)
			if err == nil {
				t.Fatalf("the job ended successfully; want MPI_Abort to end it:\n%s", out)
			}
			if ctx.Err() != nil {
				t.Fatalf("the job was still running after %v; MPI_Abort did not end it:\n%s", took, out)
			}
			if !strings.Contains(string(out), "MPI_ABORT was invoked") {
				t.Fatalf("the job failed, but not through MPI_Abort:\n%s", out)
			}
			if got, want := strings.Count(string(out), "FAULT-OK"), waiting[name]; got != want {
				t.Fatalf("%d ranks reported the timeout as pgtest wants it, want %d:\n%s", got, want, out)
			}
			t.Logf("job aborted after %v, mpirun: %v", took.Round(time.Millisecond), err)
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
