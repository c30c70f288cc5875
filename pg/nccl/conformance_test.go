package nccl

import (
	"flag"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest"
)

var flagConformance = flag.Bool("pgnccl.conformance", false, "run pgtest.Run on the fake binding layer (minutes)")

// TestConformanceFake runs the conformance suite on Groups over the fake
// binding layer: the real staging, issue path, watchdog and NCCL call
// sequences, with pg/local moving the data. It takes minutes, so it runs
// with -args -pgnccl.conformance. Known result (docs/nccl.md): everything but
// Extended's SendRecv passes; NCCL matches sends and receives by order
// and has no tags, so the tagged ring that receives in another order
// than it sends cannot be served, and its failure fails the rest of that
// world's Extended checks.
func TestConformanceFake(t *testing.T) {
	if !*flagConformance {
		t.Skip("runs with -pgnccl.conformance (minutes)")
	}
	pgtest.Run(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		gs, _ := fakeWorld(t, n, timeout)
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			out[i] = g
		}
		return out
	})
}
