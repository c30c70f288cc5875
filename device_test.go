package ddp

import (
	"fmt"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/nccl/nccltest"
)

// DDP on an NCCL group keeps its buckets in device memory; through the
// NCCL binding's test double (device memory is host memory behind opaque
// pointers, every NCCL call done by pg/local) training ends with bitwise
// the parameters of the same run on pg/local. On a GPU the same check
// runs against real NCCL (libnccl/testdata/gpu/run.sh).
func TestDeviceBucketsTrainLikeLocal(t *testing.T) {
	for _, n := range []int{1, 2} {
		for _, solver := range []string{"sgd", "adam"} {
			t.Run(fmt.Sprintf("N=%d/%s", n, solver), func(t *testing.T) {
				ctx := testCtx(t)
				spec := mlpSpec{sizes: mlpSizes(), rows: parityRows}
				data := func(step int) batch[float32] { return makeBatch[float32](spec, n*parityRows, uint64(100+step)) }
				train := func(gs []pg.ProcessGroup) []*mlp[float32] {
					replicas := startReplicas[float32](t, ctx, gs, spec, fewBuckets())
					noErrors(t, parallel(n, func(r int) error {
						return replicas[r].train(ctx, newSolver(solver), paritySteps, func(step int) batch[float32] {
							return data(step).shard(r, parityRows)
						})
					}))
					return replicas
				}
				host := train(groupsOf(t, "local", n))
				fake, err := nccltest.NewWorld(n, nccltest.Options{})
				if err != nil {
					t.Fatal(err)
				}
				dev := train(fake.ProcessGroups())
				for r := range n {
					regs := dev[r].ddp.Reducer().DeviceBuckets()
					if len(regs) == 0 || slices.ContainsFunc(regs, func(s string) bool { return s != "window" }) {
						t.Errorf("rank %d: device buckets %v, want registered windows", r, regs)
					}
					if host[r].ddp.Reducer().DeviceBuckets() != nil {
						t.Errorf("rank %d: pg/local run has device buckets", r)
					}
					if p, i := firstBitDiff(dev[r].values(), host[r].values()); p >= 0 {
						t.Errorf("rank %d: parameter %d element %d differs between the NCCL double and pg/local", r, p, i)
					}
					if err := dev[r].ddp.Close(); err != nil {
						t.Error(err)
					}
					if live, _ := fake.Registrations(r); live != 0 {
						t.Errorf("rank %d: %d registrations left after DDP.Close", r, live)
					}
				}
				if err := fake.Close(); err != nil {
					t.Error(err)
				}
			})
		}
	}
}
