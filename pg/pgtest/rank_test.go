package pgtest_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/pgtest"
)

// runRanks runs pgtest.RunRank on every rank of an n-rank local world at
// once, one goroutine per rank, as the processes of an MPI job would, each
// rank seeing only its own group (wrapped by wrap), with group timeout
// timeout.
func runRanks(t *testing.T, n int, timeout time.Duration, wrap func(pg.ProcessGroup) pg.ProcessGroup) {
	perRank(t, n, timeout, func(t *testing.T, g pg.ProcessGroup) {
		pgtest.RunRank(t, wrap(g), pgtest.RankOptions{Timeout: timeout})
	})
}

// perRank calls f on every rank of an n-rank local world at once, each in
// its own goroutine and subtest "rank=R", and closes the world after.
func perRank(t *testing.T, n int, timeout time.Duration, f func(t *testing.T, g pg.ProcessGroup)) {
	groups, err := local.New(n, local.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range groups {
			_ = g.Close()
		}
	}()
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { t.Run(fmt.Sprintf("rank=%d", r), func(t *testing.T) { f(t, g) }) })
	}
	wg.Wait()
}

// TestRunRankOverLocal runs the per-rank suite over pg/local, one
// goroutine per rank, so that the suite that MPI jobs run is itself run
// in the ordinary test run.
func TestRunRankOverLocal(t *testing.T) {
	worlds := []int{1, 3}
	if !testing.Short() {
		worlds = []int{1, 3, 4} // pg/mpi runs 2, 3 and 4 under mpirun
	}
	for _, n := range worlds {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			runRanks(t, n, 2*time.Minute, func(g pg.ProcessGroup) pg.ProcessGroup { return g })
		})
	}
}

// TestRunRankFaultsOverLocal runs every per-rank fault case over pg/local,
// one goroutine per rank, with a 1s group timeout.
func TestRunRankFaultsOverLocal(t *testing.T) {
	for _, name := range pgtest.RankFaults() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			perRank(t, 3, time.Second, func(t *testing.T, g pg.ProcessGroup) {
				pgtest.RunRankFault(t, g, name, pgtest.RankOptions{Timeout: time.Second})
			})
		})
	}
}

// TestRunRankCatchesPlantedBugs runs parts of the per-rank suite, in a
// child process, against local groups with a bug planted on one rank, and
// wants each run to fail pointing at the bug.
func TestRunRankCatchesPlantedBugs(t *testing.T) {
	for _, c := range []struct{ bug, run, want string }{
		// Rank 1 alone sees a wrong value: its own check against the reference fails.
		{"corrupt-rank-1", "world=3/rank=/Collectives/AllReduce/int64/MAX",
			"world=3 allreduce int64 MAX len=1: rank 1: element 0 is"},
		// Rank 1's result is within tolerance but not bit for bit rank 0's:
		// only the digest exchange sees it, on every rank.
		{"lsb-rank-1", "world=2/rank=/Collectives/AllReduce/float64/SUM",
			"rank 1's result differs in its bits from rank 0's (digest"},
		{"ext-reduce-writes-nonroot", "world=3/rank=/Extended/Reduce/int32/SUM",
			"rank 2: its tensor (not the root's) changed"},
		{"ext-alltoall-corrupts", "world=2/rank=/Extended/AllToAll/uneven/uint8", "world=2 alltoall uint8 splits="},
		{"ext-split-ignores-key", "world=4/rank=/Extended/Split", "got rank 1 of size 2, want rank 0"},
		{"ext-seq-off", "world=2/rank=/Extended/Seq", "collective #1 issued has Seq 2, want 1"},
		{"ext-hook-drops-sends", "world=3/rank=/Extended/Seq", "completion hook: rank 2: never saw send #1"},
		{"ext-recv-swaps-tags", "world=2/rank=/Extended/SendRecv", "tag 2: element 0 is"},
	} {
		t.Run(c.bug, func(t *testing.T) { wantCaught(t, "TestPlantedBugPerRank", c.bug, c.run, c.want) })
	}
}

// TestPlantedBugPerRank is the child of TestRunRankCatchesPlantedBugs.
func TestPlantedBugPerRank(t *testing.T) {
	bug := os.Getenv(bugEnv)
	if bug == "" {
		t.Skip("run by TestRunRankCatchesPlantedBugs")
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			// A rank that stops early (t.Fatal) leaves the others waiting
			// for it until the group times out: keep that short.
			runRanks(t, n, 5*time.Second, func(g pg.ProcessGroup) pg.ProcessGroup {
				if strings.HasPrefix(bug, "ext-") {
					return plantedExt{Extended: g.(pg.Extended), bug: bug}
				}
				return planted{ProcessGroup: g, bug: bug}
			})
		})
	}
}
