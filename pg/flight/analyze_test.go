package flight_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
	"github.com/goddp/ddp/pg/local"
)

// skippedWorld runs a 3-rank local job in which rank 2 stops issuing
// after its third allreduce while ranks 0 and 1 go on to a fourth,
// which times out; each rank dumps its recorder into a directory, from
// OnFailure on the ranks that fail and at the end on rank 2, as a
// program would. It returns the directory.
func skippedWorld(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	groups, err := local.New(3, local.Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg, failing sync.WaitGroup // failing: ranks 0 and 1, which rank 2 outlives
	failing.Add(2)
	errs := make([]error, 3)
	for r, g := range groups {
		var rec *flight.Recorder
		rec, err = flight.Wrap(g, flight.Options{Timeout: 300 * time.Millisecond, OnFailure: func(error) {
			if _, err := rec.DumpFile(dir); err != nil {
				t.Error(err)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer rec.Close()
			n := 4
			if r == 2 {
				n = 3
				defer failing.Wait() // stopped, not gone: leaving would fail the others at once
			} else {
				defer failing.Done()
			}
			for i := range n {
				x := pg.Float32s(make([]float32, 8+i))
				if err := rec.AllReduce(ctx, x, pg.Op(pg.Sum)).Wait(ctx); err != nil {
					errs[r] = err
					return
				}
			}
			if _, err := rec.DumpFile(dir); err != nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if (r < 2) != errors.Is(err, pg.ErrTimeout) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return dir
}

// The merge of real dumps names the collective rank 2 never issued,
// and rank 2.
func TestAnalyzeNamesTheRankThatNeverArrived(t *testing.T) {
	dumps, err := flight.ReadDir(skippedWorld(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(dumps) != 3 {
		t.Fatalf("%d dumps, want 3", len(dumps))
	}
	fs := flight.Analyze(dumps)
	if len(fs) != 1 {
		t.Fatalf("findings: %v", fs)
	}
	f := fs[0]
	if f.Seq != 4 || len(f.Missing) != 1 || f.Missing[0] != 2 || len(f.Mismatched) != 0 || f.State != "started" {
		t.Fatalf("finding: %+v", f)
	}
	for _, line := range []string{
		"Not all ranks joining collective 4 at entry 3", "group info: 0:default_pg",
		"collective: nccl:all_reduce", "missing ranks: {2}", "input sizes: [[11]]", "expected ranks: 3",
	} {
		if !strings.Contains(f.String(), line) {
			t.Errorf("report lacks %q:\n%s", line, f)
		}
	}
}

// A rank that issues other sizes at a sequence number is named as
// mismatched; the ranks that agree are the reference.
func TestAnalyzeNamesTheRankThatDisagrees(t *testing.T) {
	dumps := map[int]flight.Dump{}
	for r, rec := range recorded(t, 3, flight.Options{}) {
		ctx := context.Background()
		_ = rec.AllReduce(ctx, pg.Float32s(make([]float32, 2)), pg.Op(pg.Sum)) // never completes: one rank at a time
		dumps[r] = rec.Snapshot()
	}
	dumps[1].Entries[0].InputSizes = [][]int{{3}}
	fs := flight.Analyze(dumps)
	if len(fs) != 1 || len(fs[0].Mismatched) != 1 || fs[0].Mismatched[0] != 1 || len(fs[0].Missing) != 0 {
		t.Fatalf("findings: %+v", fs)
	}
	if s := fs[0].String(); !strings.Contains(s, "mismatched ranks: {1}") || !strings.Contains(s, "input_sizes=[[3]]") {
		t.Errorf("report:\n%s", s)
	}
}

// ReadDir skips files that are not dumps and refuses a directory with none.
func TestReadDirRefusesAnEmptyDirectory(t *testing.T) {
	if _, err := flight.ReadDir(t.TempDir(), ""); err == nil {
		t.Error("no error for a directory without dumps")
	}
}

// A rank without a dump is named by MissingDumps and left out of the
// comparison, rather than blamed for every collective.
func TestAnalyzeLeavesOutRanksWithoutDumps(t *testing.T) {
	dumps, err := flight.ReadDir(skippedWorld(t), "")
	if err != nil {
		t.Fatal(err)
	}
	delete(dumps, 2)
	if m := flight.MissingDumps(dumps); len(m) != 1 || m[0] != 2 {
		t.Errorf("MissingDumps: %v, want [2]", m)
	}
	if fs := flight.Analyze(dumps); len(fs) != 0 {
		t.Errorf("findings without rank 2's dump: %v", fs)
	}
}

// Without the culprit's dump, Stalled names the collective ranks 0 and
// 1 wait in (the fourth, which rank 2 never issued) and rank 2; with
// every dump it says nothing (Analyze names the rank then).
func TestStalledNamesTheRankWithoutADump(t *testing.T) {
	dumps, err := flight.ReadDir(skippedWorld(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if fs := flight.Stalled(dumps); len(fs) != 0 {
		t.Errorf("Stalled with every dump: %v", fs)
	}
	delete(dumps, 2)
	fs := flight.Stalled(dumps)
	if len(fs) != 1 {
		t.Fatalf("Stalled without rank 2's dump: %v, want one finding", fs)
	}
	if f := fs[0]; f.Seq != 4 || len(f.Missing) != 1 || f.Missing[0] != 2 || f.State == "completed" {
		t.Errorf("Stalled: %+v, want collective 4, missing [2], not completed", f)
	}
	if s := fs[0].String(); !strings.Contains(s, "missing ranks: {2}") {
		t.Errorf("Stalled's finding prints:\n%s", s)
	}
}
