package nccl

import (
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/pgtest"
)

// TestConformanceFake runs the conformance suite on Groups over the fake
// binding layer: the real issue path, staging, watchdog, point-to-point
// lanes and NCCL call sequences, with pg/local moving the data. The
// InconsistentSplits faults are skipped (pgtest.Options
// UncheckedAllToAllSplits): real NCCL, like c10d, cannot detect alltoall
// splits that disagree between ranks (docs/nccl.md, Known limits).
func TestConformanceFake(t *testing.T) {
	pgtest.RunWith(t, func(t testing.TB, n int, timeout time.Duration) []pg.ProcessGroup {
		gs, _ := fakeWorld(t, n, timeout)
		out := make([]pg.ProcessGroup, n)
		for i, g := range gs {
			out[i] = g
		}
		return out
	}, pgtest.Options{OrderedPointToPoint: true, UncheckedAllToAllSplits: true})
}
