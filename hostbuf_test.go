package ddp

import (
	"fmt"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/tcp"
)

// TestGorgoniaParityHostBuffers: on tcp with shared memory, the reducer
// keeps its buckets in the group's arena (backend.HostBufferAllocator), and a
// model wide enough for its buckets to skip the small-message path is
// reduced in place, ranks reading and writing each other's buckets (the
// group counts those AllReduces). Training still matches one process on
// the whole batch, and the replicas stay bitwise equal, with one bucket
// and with one per parameter.
func TestGorgoniaParityHostBuffers(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, opts := range []Options{oneBucket(), oneParamPerBucket()} {
			t.Run(fmt.Sprintf("N=%d/cap=%d", n, opts.BucketCapBytes), func(t *testing.T) {
				ctx := testCtx(t)
				spec := mlpSpec{sizes: []int{32, 96, 64, 4}, rows: parityRows} // 24 and 48 KiB weights
				data := func(step int) batch[float64] { return makeBatch[float64](spec, n*parityRows, uint64(100+step)) }
				gs := groupsOf(t, "tcp", n)
				replicas := startReplicas[float64](t, ctx, gs, spec, opts)
				noErrors(t, parallel(n, func(r int) error {
					return replicas[r].train(ctx, newSolver("adam"), paritySteps, func(step int) batch[float64] {
						return data(step).shard(r, parityRows)
					})
				}))
				ref := newMLP[float64](t, mlpSpec{sizes: spec.sizes, rows: n * parityRows}, referenceSeed).mustBuild(t)
				if err := ref.train(ctx, newSolver("adam"), paritySteps, data); err != nil {
					t.Fatal(err)
				}
				checkReplicas(t, replicas, ref.values(), tol64)
				var g *tcp.Group
				if !pg.As(gs[0], &g) {
					t.Fatalf("rank 0's group is %T, not pg/tcp's", gs[0])
				}
				// Wrap's broadcast and the steps' buckets: at least a bucket
				// of each step went in place.
				if got := g.InPlaceAllReduces(); got < paritySteps {
					t.Errorf("%d AllReduces in place in %d steps, want at least one per step", got, paritySteps)
				}
			})
		}
	}
}
