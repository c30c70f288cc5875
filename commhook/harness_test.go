package commhook_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/local"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// The harness drives hooks as the reducer does: on each rank, every
// bucket of an iteration goes through the hook in order, without
// waiting, then the rank waits for all of them.

// localGroups starts n in-process ranks.
func localGroups(t testing.TB, n int) []pg.ProcessGroup {
	t.Helper()
	gs, err := local.New(n, local.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]pg.ProcessGroup, n)
	for i, g := range gs {
		out[i] = g
	}
	t.Cleanup(func() { closeAll(out) })
	return out
}

// tcpGroups starts n TCP ranks on loopback, meeting through a HashStore.
func tcpGroups(t testing.TB, n int, linkBytesPerSec int64) []pg.ProcessGroup {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := store.NewHashStore(store.HashStoreOptions{})
	out := make([]pg.ProcessGroup, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			g, err := tcp.New(ctx, st, tcp.Options{Rank: r, Size: n, Secret: []byte("commhook-test-secret-0123456789"),
				ListenAddr: "127.0.0.1:0", Timeout: 20 * time.Second, LinkBytesPerSec: linkBytesPerSec})
			out[r], errs[r] = g, err
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		closeAll(out)
		st.Close()
	})
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func closeAll(gs []pg.ProcessGroup) {
	for _, g := range gs {
		if g != nil {
			g.Close()
		}
	}
}

// onRanks runs fn on every rank at once and fails t with the first error.
func onRanks(t testing.TB, gs []pg.ProcessGroup, fn func(r int, g pg.ProcessGroup) error) {
	t.Helper()
	errs := make([]error, len(gs))
	var wg sync.WaitGroup
	for r, g := range gs {
		wg.Go(func() { errs[r] = fn(r, g) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// iterate runs one iteration of buckets through h on one rank, as the
// reducer would, and waits for them in order.
func iterate(ctx context.Context, h commhook.Hook, g pg.ProcessGroup, buckets []*commhook.GradBucket) error {
	works := make([]pg.Work, len(buckets))
	for i, b := range buckets {
		works[i] = h.Run(ctx, g, b)
	}
	for i, w := range works {
		if err := w.Wait(ctx); err != nil {
			return fmt.Errorf("bucket %d: %w", i, err)
		}
	}
	return nil
}

// layer is a parameter's shape in a test model.
type layer []int

func (l layer) numel() int {
	n := 1
	for _, d := range l {
		n *= d
	}
	return n
}

// newBuckets lays out the parameters of plan (bucket by bucket, shapes
// in each) in fresh buffers of dtype d. Parameter indices count up
// through the plan.
func newBuckets(d pg.Dtype, plan [][]layer) []*commhook.GradBucket {
	var out []*commhook.GradBucket
	idx := 0
	for b, shapes := range plan {
		gb := &commhook.GradBucket{Index: b, IsLast: b == len(plan)-1}
		off := 0
		for _, s := range shapes {
			gb.Params = append(gb.Params,
				commhook.ParamView{Index: idx, Name: fmt.Sprintf("p%d", idx), Shape: s, Offset: off, Len: s.numel()})
			idx++
			off += s.numel()
		}
		gb.Buffer = pg.NewTensor(d, off)
		out = append(out, gb)
	}
	return out
}

// fill writes values into the buckets' buffers, element by element, in
// float64 (rounded to the buffer's dtype).
func fill(buckets []*commhook.GradBucket, value func(bucket, i int) float64) {
	for b, gb := range buckets {
		n := gb.Buffer.Len()
		v := make([]float64, n)
		for i := range v {
			v[i] = value(b, i)
		}
		if err := backend.Convert(gb.Buffer, pg.Float64s(v)); err != nil {
			panic(err)
		}
	}
}

// values reads a bucket's buffer as float64.
func values(b *commhook.GradBucket) []float64 {
	v := make([]float64, b.Buffer.Len())
	if err := backend.Convert(pg.Float64s(v), b.Buffer); err != nil {
		panic(err)
	}
	return v
}

// randomGrads fills every rank's buckets with normal values, from a
// generator seeded by (seed, rank).
func randomGrads(buckets []*commhook.GradBucket, seed uint64, rank int, scale float64) {
	rng := rand.New(rand.NewPCG(seed, uint64(rank)))
	fill(buckets, func(int, int) float64 { return rng.NormFloat64() * scale })
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
