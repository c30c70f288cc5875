package commhook_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
)

// jittery delays the completion of each allreduce by a random time,
// different on every rank, so that the goroutines issuing PowerSGD's
// later collectives wake up in a different order on every rank: without
// Note [issue order across buckets], the ranks would send bucket 1's P
// and bucket 0's Q at the same position.
type jittery struct {
	pg.ProcessGroup
	mu  sync.Mutex
	rng *rand.Rand
}

// Inner is the delayed group, for pg.As.
func (j *jittery) Inner() pg.ProcessGroup { return j.ProcessGroup }

func (j *jittery) AllReduce(ctx context.Context, t pg.Tensor, op pg.ReduceOp) pg.Work {
	w := j.ProcessGroup.AllReduce(ctx, t, op)
	j.mu.Lock()
	d := time.Duration(j.rng.IntN(3000)) * time.Microsecond
	j.mu.Unlock()
	f := pg.NewFuture()
	go func() {
		err := w.Wait(ctx)
		time.Sleep(d)
		f.Complete(err)
	}()
	return f
}

// inflightPlan has buckets of different sizes and mixes: only
// compressed tensors, compressed and not, only uncompressed (which sends
// no P or Q), so that consecutive collectives always differ in size.
var inflightPlan = [][]layer{{{64, 10}, {10}}, {{7}}, {{100, 64}}, {{3, 3}, {50, 100}, {100}}, {{50}},
	{{784, 50}, {50}}}

// PowerSGD and BatchedPowerSGD on the TCP backend, three ranks, six
// buckets of different sizes in flight at once, with random delays: every
// rank ends every iteration with the same bits, which match what the
// in-process backend computes to float tolerance.
func TestPowerSGDOnTCPWithBucketsInFlight(t *testing.T) {
	const world, iters = 3, 5
	for _, name := range []string{"powersgd", "batched_powersgd"} {
		t.Run(name, func(t *testing.T) {
			overTCP := runInflight(t, tcpGroups(t, world, 0), name, iters, true)
			inProcess := runInflight(t, localGroups(t, world), name, iters, false)
			for it := range iters {
				for r := range world {
					if !slices.Equal(overTCP[it][r], overTCP[it][0]) {
						t.Fatalf("iteration %d: rank %d ended different from rank 0", it, r)
					}
				}
				a, b := overTCP[it][0], inProcess[it][0]
				var worst, scale float64
				for i := range a {
					worst, scale = max(worst, math.Abs(a[i]-b[i])), max(scale, math.Abs(b[i]))
				}
				if worst > 1e-4*scale {
					t.Errorf("iteration %d: TCP and in-process results differ by %.3g (scale %.3g)", it, worst, scale)
				}
			}
		})
	}
}

// runInflight returns, per iteration and rank, every bucket's result
// concatenated.
func runInflight(t *testing.T, gs []pg.ProcessGroup, name string, iters int, jitter bool) [][][]float64 {
	world := len(gs)
	hooks := make([]commhook.Hook, world)
	for r := range hooks {
		o := commhook.DefaultPowerSGDOptions()
		o.StartIter, o.MatrixApproximationRank = 2, 2
		var err error
		if name == "powersgd" {
			hooks[r], err = commhook.NewPowerSGD(o)
		} else {
			hooks[r], err = commhook.NewBatchedPowerSGD(o)
		}
		if err != nil {
			t.Fatal(err)
		}
		if jitter {
			gs[r] = &jittery{ProcessGroup: gs[r], rng: rand.New(rand.NewPCG(uint64(r), 5))}
		}
	}
	out := make([][][]float64, iters)
	ctx := testCtx(t)
	for it := range iters {
		out[it] = make([][]float64, world)
		onRanks(t, gs, func(r int, g pg.ProcessGroup) error {
			bs := newBuckets(pg.Float32, inflightPlan)
			randomGrads(bs, uint64(it), r, 1)
			err := iterate(ctx, hooks[r], g, bs)
			for _, b := range bs {
				out[it][r] = append(out[it][r], values(b)...)
			}
			return err
		})
	}
	return out
}
