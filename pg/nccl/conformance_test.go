package nccl

import (
	"flag"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest"
)

var flagConformance = flag.Bool("pgnccl.conformance", false,
	"run the full TestConformanceFake under -race too (about 2 minutes)")

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

// TestConformanceFake runs the conformance suite on Groups over the fake
// binding layer: the real issue path, staging, watchdog, point-to-point
// lanes and NCCL call sequences, with pg/local moving the data. The
// InconsistentSplits faults are skipped (pgtest.Options
// UncheckedAllToAllSplits): real NCCL, like c10d, cannot detect alltoall
// splits that disagree between ranks (docs/nccl.md, Known limits). It
// runs by default (about 14 s with -short, 25 s without), except the full
// grid under -race (about 2 minutes), which needs -args -pgnccl.conformance.
func TestConformanceFake(t *testing.T) {
	if raceEnabled && !testing.Short() && !*flagConformance {
		t.Skip("the full grid under -race takes about 2 minutes: run it with -args -pgnccl.conformance, or use -short")
	}
	pgtest.RunWith(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		gs, _ := fakeWorld(t, n, timeout)
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			out[i] = g
		}
		return out
	}, pgtest.Options{OrderedPointToPoint: true, UncheckedAllToAllSplits: true})
}
