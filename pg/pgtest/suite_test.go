package pgtest_test

import (
	"context"
	"errors"
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
		{"corrupt-all", "Collectives/world=2/AllReduce/float32/SUM",
			"world=2 allreduce float32 SUM len=1: rank 0: 1 of 1 elements differ"},
		{"corrupt-rank-1", "Collectives/world=3/AllReduce/int64/MAX", "rank 1's result differs in its bits from rank 0's"},
		{"ignore-close", "Faults/Close/world=2/rank=1", "is a timeout; want the departure of rank 1 noticed"},
		{"not-extended", "Extended/world=2/Reduce",
			"does not implement pg.Extended: it lacks pg.MonitoredBarrierer, pg.Backender, pg.Rooted"},
		{"ext-reduce-writes-nonroot", "Extended/world=3/Reduce/int32/SUM", "rank 2: its tensor (not the root's) changed"},
		{"ext-alltoall-corrupts", "Extended/world=2/AllToAll/uneven/uint8", "world=2 alltoall uint8 splits="},
		{"ext-seq-off", "Extended/Seq/world=2", "collective #1 issued has Seq 2, want 1"},
		{"ext-split-ignores-key", "Extended/world=4/Split",
			"Split(parity, -rank): subgroup of parent ranks [2 0]: parent rank 2 got rank 1 of size 2, want rank 0"},
		{"ext-hook-drops-sends", "Extended/Seq/world=2", "completion hook: rank 0: never saw send #1"},
		{"ext-subgroup-ignores-close", "Extended/Faults/Subgroup/Close",
			"is a timeout; want the departure of rank 2 noticed"},
		{"ext-recv-swaps-tags", "Extended/world=2/SendRecv", "rank 1 receives 2 then 1: tag 2: element 0 is"},
		{"nil-ctx-panics", "Misuse/world=2/open", "world=2 allreduce nil ctx: rank 1: panicked: planted: nil ctx"},
		{"closed-allreduce-succeeds", "Misuse/world=2/closed",
			"world=2 after Close: allreduce: rank 0: got error <nil>, want one wrapping pg.ErrClosed"},
	} {
		t.Run(c.bug, func(t *testing.T) { wantCaught(t, "TestPlantedBug", c.bug, c.run, c.want) })
	}
}

// wantCaught runs test (a child test of this binary) under -short with
// bug planted and only the subtests run selects, and wants it to fail
// with a message containing want.
func wantCaught(t *testing.T, test, bug, run, want string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$/"+run, "-test.short", "-test.count=1")
	cmd.Env = append(os.Environ(), bugEnv+"="+bug)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the suite passed a backend with bug %q:\n%s", bug, out)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("the suite failed, but without %q:\n%s", want, out)
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
			if strings.HasPrefix(bug, "ext-") {
				out[i] = plantedExt{Extended: g, bug: bug}
			}
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

// AllReduce flips a high bit of the result on every rank, or on rank 1
// only; or (lsb-rank-1) the lowest bit of rank 1's first element; or
// panics on a nil ctx; or succeeds on a closed group.
func (p planted) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	if ctx == nil && p.bug == "nil-ctx-panics" {
		panic("planted: nil ctx")
	}
	w := p.ProcessGroup.AllReduce(ctx, t, op)
	if p.bug == "closed-allreduce-succeeds" && errors.Is(w.Err(), pg.ErrClosed) {
		return pg.Completed(nil)
	}
	lsb := p.bug == "lsb-rank-1" && p.Rank() == 1
	if t.Len() == 0 || !(lsb || p.bug == "corrupt-all" || p.bug == "corrupt-rank-1" && p.Rank() == 1) {
		return w
	}
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		if lsb {
			t.Data[0] ^= 1 // the last bit of the first float's mantissa
		} else {
			t.Data[len(t.Data)-1] ^= 0x40 // in the exponent of the last float
		}
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

// plantedExt is a local group with a bug in a pg.Extended method.
type plantedExt struct {
	pg.Extended
	bug string
}

// after runs f once w has finished, before the returned Work finishes.
func after(ctx context.Context, w pg.Work, f func()) pg.Work {
	out := pg.NewSeqFuture(w.Seq())
	go func() {
		err := w.Wait(ctx)
		f()
		out.Complete(err)
	}()
	return out
}

// Reduce leaves a non-root rank's last byte flipped.
func (p plantedExt) Reduce(ctx context.Context, t pg.Tensor, root int, op pg.ReduceOp) pg.Work {
	w := p.Extended.Reduce(ctx, t, root, op)
	if p.bug != "ext-reduce-writes-nonroot" || p.Rank() == root || t.Len() == 0 {
		return w
	}
	return after(ctx, w, func() { t.Data[len(t.Data)-1] ^= 1 })
}

// AllToAll flips the first byte of the output.
func (p plantedExt) AllToAll(ctx context.Context, out, in pg.Tensor, outSplits, inSplits []int) pg.Work {
	w := p.Extended.AllToAll(ctx, out, in, outSplits, inSplits)
	if p.bug != "ext-alltoall-corrupts" || len(out.Data) == 0 {
		return w
	}
	return after(ctx, w, func() { out.Data[0] ^= 0x80 })
}

// seqOff is a Work whose Seq is one too many.
type seqOff struct{ pg.Work }

func (s seqOff) Seq() uint64 { return s.Work.Seq() + 1 }

// AllReduce numbers its Work one too high.
func (p plantedExt) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	w := p.Extended.AllReduce(ctx, t, op)
	if p.bug == "ext-seq-off" {
		return seqOff{w}
	}
	return w
}

// Split ignores the key.
func (p plantedExt) Split(ctx context.Context, color, key int) (pg.ProcessGroup, error) {
	if p.bug == "ext-split-ignores-key" {
		key = 0
	}
	return p.Extended.Split(ctx, color, key)
}

// OnCompletion hides sends from the hook.
func (p plantedExt) OnCompletion(hook func(pg.WorkInfo)) {
	if p.bug != "ext-hook-drops-sends" {
		p.Extended.OnCompletion(hook)
		return
	}
	p.Extended.OnCompletion(func(info pg.WorkInfo) {
		if info.Op != pg.OpSend {
			hook(info)
		}
	})
}

// Recv receives tag 1 as tag 2 and tag 2 as tag 1.
func (p plantedExt) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if p.bug == "ext-recv-swaps-tags" && (tag == 1 || tag == 2) {
		tag = 3 - tag
	}
	return p.Extended.Recv(ctx, t, src, tag)
}

// NewGroup returns subgroups whose Close does nothing, or that number or
// report their Works wrongly (pgtest.RunRank checks those on a subgroup).
func (p plantedExt) NewGroup(ctx context.Context, ranks []int) (pg.ProcessGroup, error) {
	g, err := p.Extended.NewGroup(ctx, ranks)
	if g == nil || p.bug != "ext-subgroup-ignores-close" && p.bug != "ext-seq-off" && p.bug != "ext-hook-drops-sends" {
		return g, err
	}
	return plantedExt{Extended: g.(pg.Extended), bug: p.bug}, err
}

// Close does nothing in subgroups with the ext-subgroup-ignores-close bug
// (the world's own groups are closed by the factory's cleanup).
func (p plantedExt) Close() error {
	if p.bug == "ext-subgroup-ignores-close" {
		return nil
	}
	return p.Extended.Close()
}
