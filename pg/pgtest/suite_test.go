package pgtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
)

// bugEnv tells a child test process which bug to plant.
const bugEnv = "PGTEST_PLANTED_BUG"

// TestSuiteCatchesPlantedBugs runs parts of the suite, in a child process
// of this test binary, against local groups with a bug planted, and wants
// each run to fail with a message that points at the bug.
func TestSuiteCatchesPlantedBugs(t *testing.T) {
	for _, c := range []struct{ bug, run, want string }{
		{"corrupt-all", "Collectives/world=2/AllReduce/float32/SUM", "world=2 allreduce float32 SUM len=1: rank 0: 1 of 1 elements differ"},
		{"corrupt-rank-1", "Collectives/world=3/AllReduce/int64/MAX", "rank 1's result differs in its bits from rank 0's"},
		{"ignore-close", "Faults/Close/world=2/rank=1", "is a timeout; want the departure of rank 1 noticed"},
	} {
		t.Run(c.bug, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestPlantedBug$/"+c.run, "-test.short", "-test.count=1")
			cmd.Env = append(os.Environ(), bugEnv+"="+c.bug)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a backend with bug %q:\n%s", c.bug, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Fatalf("the suite failed, but without %q:\n%s", c.want, out)
			}
		})
	}
}

// TestPlantedBug is the child of TestSuiteCatchesPlantedBugs.
func TestPlantedBug(t *testing.T) {
	bug := os.Getenv(bugEnv)
	if bug == "" {
		t.Skip("run by TestSuiteCatchesPlantedBugs")
	}
	pgtest.Run(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		groups, err := local.New(n, local.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		out := make([]pg.ProcessGroup, n)
		for i, g := range groups {
			out[i] = planted{ProcessGroup: g, bug: bug}
			t.Cleanup(func() { _ = g.Close() })
		}
		return out
	})
}

// planted is a local group with a bug.
type planted struct {
	pg.ProcessGroup
	bug string
}

// AllReduce flips a high bit of the result on every rank, or on rank 1 only.
func (p planted) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	w := p.ProcessGroup.AllReduce(ctx, t, op)
	if t.Len() == 0 || !(p.bug == "corrupt-all" || p.bug == "corrupt-rank-1" && p.Rank() == 1) {
		return w
	}
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		t.Data[len(t.Data)-1] ^= 0x40 // in the exponent of the last float
		f.Complete(err)
	}()
	return f
}

// Close does nothing with the ignore-close bug: the peers are not told.
func (p planted) Close() error {
	if p.bug == "ignore-close" {
		return nil
	}
	return p.ProcessGroup.Close()
}
