//go:build linux

package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
	"github.com/goddp/ddp/pg/pgtest"
	"github.com/goddp/ddp/pg/tcp/internal/shm"
)

// TestShmCollectives runs Broadcast, AllGather, ReduceScatter and Reduce
// on tensors of several chunks, with shared memory on and off. With it
// on, each must run through the segments (the world's chunk counter
// advances by the chunks it cut the tensor into); either way the results
// must be within tolerance of pgtest's serial reference, inputs must be
// left as they were, and, through shared memory, ReduceScatter's and
// Reduce's results must be bit for bit AllReduce's, which reduces in the
// same rank order.
func TestShmCollectives(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, mode := range []string{"shm", "tcp"} {
			t.Run(fmt.Sprintf("%s/world=%d", mode, n), func(t *testing.T) {
				gs := newGroups(t, n, time.Minute, func(o *Options) { o.NoSharedMemory = mode == "tcp" })
				if (gs[0].shm != nil) != (mode == "shm") {
					t.Fatalf("shared memory in use = %v in mode %s", gs[0].shm != nil, mode)
				}
				c := &shmChecker{t: t, gs: gs}
				c.broadcast(n-1, (2*shm.SlotBytes+shm.SlotBytes/2)/4+1)
				c.allGather(shm.SlotBytes/4 + 3)
				c.reduceScatter(pg.Op(pg.Avg), 2*(shm.SlotBytes/n/4)+5)
				c.reduce(1%n, pg.Op(pg.Avg), shm.SlotBytes/4*2+n+1)
				c.reduce(0, pg.Op(pg.Max), 1000)
			})
		}
	}
}

type shmChecker struct {
	t  *testing.T
	gs []*Group
}

// run runs f on every rank and checks that it succeeded and, with shared
// memory, that it ran the given number of chunks through it.
func (c *shmChecker) run(what string, chunks int, f func(r int, g *Group) pg.Work) {
	c.t.Helper()
	var before uint32
	if s := c.gs[0].shm; s != nil {
		before = s.Chunk()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for r, err := range each(c.gs, func(r int, g *Group) error { return f(r, g).Wait(ctx) }) {
		if err != nil {
			c.t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
	if s := c.gs[0].shm; s != nil {
		if got := int(s.Chunk() - before); got != chunks {
			c.t.Errorf("%s ran %d chunks through shared memory, want %d", what, got, chunks)
		}
	}
}

func randomFloats(length int, seed uint64) pg.Tensor {
	rng := rand.New(rand.NewPCG(seed, 7))
	v := make([]float32, length)
	for i := range v {
		v[i] = 1 + rng.Float32() // positive: sums do not cancel, so a relative tolerance holds
	}
	return pg.Float32s(v)
}

func clones(ts []pg.Tensor) []pg.Tensor {
	out := make([]pg.Tensor, len(ts))
	for i, t := range ts {
		out[i] = pg.NewTensor(t.Dtype, t.Len())
		copy(out[i].Data, t.Data)
	}
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (c *shmChecker) broadcast(root, length int) {
	n := len(c.gs)
	bufs := make([]pg.Tensor, n)
	for r := range bufs {
		bufs[r] = randomFloats(length, uint64(r))
	}
	want := clones(bufs)[root]
	what := fmt.Sprintf("broadcast of %d float32 from %d", length, root)
	c.run(what, ceilDiv(4*length, shm.SlotBytes),
		func(r int, g *Group) pg.Work { return g.Broadcast(context.Background(), bufs[r], root) })
	for r := range bufs {
		if !bytes.Equal(bufs[r].Data, want.Data) {
			c.t.Errorf("%s: rank %d's tensor is not root's", what, r)
		}
	}
}

func (c *shmChecker) allGather(length int) {
	n := len(c.gs)
	ins, outs := make([]pg.Tensor, n), make([]pg.Tensor, n)
	for r := range ins {
		ins[r] = randomFloats(length, uint64(10+r))
		outs[r] = randomFloats(n*length, uint64(20+r))
	}
	kept := clones(ins)
	what := fmt.Sprintf("allgather of %d float32", length)
	c.run(what, ceilDiv(4*length, shm.SlotBytes),
		func(r int, g *Group) pg.Work { return g.AllGather(context.Background(), outs[r], ins[r]) })
	for r := range outs {
		for j := range n {
			if !bytes.Equal(outs[r].Slice(j*length, (j+1)*length).Data, kept[j].Data) {
				c.t.Errorf("%s: rank %d's segment %d is not rank %d's input", what, r, j, j)
			}
		}
		if !bytes.Equal(ins[r].Data, kept[r].Data) {
			c.t.Errorf("%s: rank %d's input changed", what, r)
		}
	}
}

// allReduced is what the group's AllReduce makes of ins, for comparison.
func (c *shmChecker) allReduced(ins []pg.Tensor, op pg.ReduceOp) pg.Tensor {
	bufs := clones(ins)
	c.run("allreduce", ceilDiv(len(ins[0].Data), shm.SlotBytes),
		func(r int, g *Group) pg.Work { return g.AllReduce(context.Background(), bufs[r], op) })
	return bufs[0]
}

func (c *shmChecker) reduceScatter(op pg.ReduceOp, length int) {
	n := len(c.gs)
	ins, outs := make([]pg.Tensor, n), make([]pg.Tensor, n)
	for r := range ins {
		ins[r] = randomFloats(n*length, uint64(30+r))
		outs[r] = randomFloats(length, uint64(40+r))
	}
	kept := clones(ins)
	want, err := pgtest.Reduce(ins, op)
	if err != nil {
		c.t.Fatal(err)
	}
	what := fmt.Sprintf("reducescatter %v of %d float32 per rank", op, length)
	c.run(what, ceilDiv(4*length, shm.SlotBytes/n/4*4), func(r int, g *Group) pg.Work {
		return g.ReduceScatter(context.Background(), outs[r], ins[r], op)
	})
	var same pg.Tensor
	if c.gs[0].shm != nil {
		same = c.allReduced(ins, op)
	}
	for r := range outs {
		if err := pgtest.Compare(outs[r], want.Slice(r*length, (r+1)*length), pgtest.Tolerance(pg.Float32, n)); err != nil {
			c.t.Errorf("%s: rank %d: %v", what, r, err)
		}
		if same.Data != nil && !bytes.Equal(outs[r].Data, same.Slice(r*length, (r+1)*length).Data) {
			c.t.Errorf("%s: rank %d's result is not bit for bit its segment of AllReduce's", what, r)
		}
		if !bytes.Equal(ins[r].Data, kept[r].Data) {
			c.t.Errorf("%s: rank %d's input changed", what, r)
		}
	}
}

func (c *shmChecker) reduce(root int, op pg.ReduceOp, length int) {
	n := len(c.gs)
	bufs := make([]pg.Tensor, n)
	for r := range bufs {
		bufs[r] = randomFloats(length, uint64(50+r))
	}
	kept := clones(bufs)
	want, err := pgtest.Reduce(kept, op)
	if err != nil {
		c.t.Fatal(err)
	}
	what := fmt.Sprintf("reduce %v of %d float32 to %d", op, length, root)
	c.run(what, ceilDiv(4*length, shm.SlotBytes), func(r int, g *Group) pg.Work {
		return g.Reduce(context.Background(), bufs[r], root, op)
	})
	if err := pgtest.Compare(bufs[root], want, pgtest.Tolerance(pg.Float32, n)); err != nil {
		c.t.Errorf("%s: root: %v", what, err)
	}
	if c.gs[0].shm != nil && !bytes.Equal(bufs[root].Data, c.allReduced(kept, op).Data) {
		c.t.Errorf("%s: root's result is not bit for bit AllReduce's", what)
	}
	for r := range bufs {
		if r != root && !bytes.Equal(bufs[r].Data, kept[r].Data) {
			c.t.Errorf("%s: rank %d's tensor changed", what, r)
		}
	}
}

// TestShmCollectivesMismatch: ranks that issue different collectives, or
// one with different sizes, roots or ops, fail with pg.ErrMismatch naming
// the other, through shared memory as over TCP.
func TestShmCollectivesMismatch(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	for _, c := range []struct {
		name string
		says string
		f    func(ctx context.Context, r int, g *Group) pg.Work
	}{
		{"allgather sizes", "allgather of 4000 bytes", func(ctx context.Context, r int, g *Group) pg.Work {
			l := 1000 + 1000*r
			return g.AllGather(ctx, f32(2*l), f32(l))
		}},
		{"broadcast roots", "from root 1", func(ctx context.Context, r int, g *Group) pg.Work {
			return g.Broadcast(ctx, f32(100), r)
		}},
		{"reducescatter ops", "(MAX)", func(ctx context.Context, r int, g *Group) pg.Work {
			op := pg.Op(pg.Sum)
			if r == 1 {
				op = pg.Op(pg.Max)
			}
			return g.ReduceScatter(ctx, f32(100), f32(200), op)
		}},
		{"reduce beside allreduce", "allreduce", func(ctx context.Context, r int, g *Group) pg.Work {
			if r == 0 {
				return g.Reduce(ctx, f32(100), 0, pg.Op(pg.Sum))
			}
			return g.AllReduce(ctx, f32(100), pg.Op(pg.Sum))
		}},
		{"gather roots", "to root 1", func(ctx context.Context, r int, g *Group) pg.Work {
			return g.Gather(ctx, f32(200), f32(100), r)
		}},
		{"scatter sizes", "scatter of 800 bytes", func(ctx context.Context, r int, g *Group) pg.Work {
			l := 100 + 100*r
			return g.Scatter(ctx, f32(l), f32(2*l*(1-r)), 0)
		}},
		{"alltoall splits", "split", func(ctx context.Context, r int, g *Group) pg.Work {
			// Rank 0 sends 2 elements to rank 1, which expects 1; rank 1
			// sends 1 to rank 0, which expects 3.
			in, out := [][]int{{2, 2}, {1, 3}}[r], [][]int{{2, 3}, {1, 3}}[r]
			return g.AllToAll(ctx, f32(sum(out)), f32(sum(in)), out, in)
		}},
		{"barrier beside allreduce", "allreduce of 400 bytes", func(ctx context.Context, r int, g *Group) pg.Work {
			if r == 0 {
				return g.Barrier(ctx)
			}
			return g.AllReduce(ctx, f32(100), pg.Op(pg.Sum))
		}},
		{"alltoall beside gather", "gather of 400 bytes", func(ctx context.Context, r int, g *Group) pg.Work {
			if r == 0 {
				return g.AllToAll(ctx, f32(200), f32(200), nil, nil)
			}
			return g.Gather(ctx, f32(0), f32(100), 0)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroups(t, 2, 10*time.Second, nil)
			if gs[0].shm == nil {
				t.Fatal("shared memory not in use")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := each(gs, func(r int, g *Group) error { return c.f(ctx, r, g).Wait(ctx) })
			for r, err := range errs {
				var ce *pg.CollectiveError
				if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || ce.Peer != 1-r {
					t.Errorf("rank %d: got %v, want a mismatch naming rank %d", r, err, 1-r)
				}
			}
			if !strings.Contains(errs[0].Error(), c.says) {
				t.Errorf("rank 0's error %q does not say %q", errs[0], c.says)
			}
		})
	}
}

// TestShmGarbageCollectives: a peer whose segment holds garbage, with
// counters that claim every chunk is ready, makes Broadcast, AllGather,
// ReduceScatter, Reduce, Gather, Scatter and AllToAll fail with
// pg.ErrMismatch naming it; nothing reads out of range.
func TestShmGarbageCollectives(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(ctx context.Context, g *Group) pg.Work
	}{
		{"broadcast", func(ctx context.Context, g *Group) pg.Work {
			return g.Broadcast(ctx, pg.NewTensor(pg.Float32, 3<<20), 1)
		}},
		{"allgather", func(ctx context.Context, g *Group) pg.Work {
			return g.AllGather(ctx, pg.NewTensor(pg.Float32, 6<<20), pg.NewTensor(pg.Float32, 3<<20))
		}},
		{"reducescatter", func(ctx context.Context, g *Group) pg.Work {
			return g.ReduceScatter(ctx, pg.NewTensor(pg.Float32, 3<<20), pg.NewTensor(pg.Float32, 6<<20), pg.Op(pg.Avg))
		}},
		{"reduce", func(ctx context.Context, g *Group) pg.Work {
			return g.Reduce(ctx, pg.NewTensor(pg.Int64, 3<<20), 0, pg.Op(pg.Sum))
		}},
		{"gather", func(ctx context.Context, g *Group) pg.Work {
			return g.Gather(ctx, pg.NewTensor(pg.Float32, 6<<20), pg.NewTensor(pg.Float32, 3<<20), 0)
		}},
		{"scatter", func(ctx context.Context, g *Group) pg.Work {
			return g.Scatter(ctx, pg.NewTensor(pg.Float32, 3<<20), pg.Tensor{Dtype: pg.Float32}, 1)
		}},
		{"alltoall", func(ctx context.Context, g *Group) pg.Work {
			return g.AllToAll(ctx, pg.NewTensor(pg.Float32, 6<<20), pg.NewTensor(pg.Float32, 8<<20), []int{5 << 20, 1 << 20},
				[]int{5 << 20, 3 << 20})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			gs := newGroups(t, 2, 5*time.Second, nil)
			if gs[0].shm == nil {
				t.Fatal("shared memory not in use")
			}
			seg := gs[0].shm.Segment(1)
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range seg {
				seg[i] = byte(rng.Uint32())
			}
			for _, off := range []int{shm.OffArrive, shm.OffReduced, shm.OffDone} {
				binary.NativeEndian.PutUint32(gs[0].shm.Segment(1)[off:], 1<<30)
			}
			ctx := context.Background()
			err := c.f(ctx, gs[0]).Wait(ctx)
			var ce *pg.CollectiveError
			if !errors.As(err, &ce) || !errors.Is(err, pg.ErrMismatch) || ce.Peer != 1 {
				t.Fatalf("got %v, want a mismatch naming rank 1", err)
			}
		})
	}
}

// TestShmCollectivesPeerGone: a peer that never issues the collective
// makes the others fail naming it, at once when it closes its group, and
// with pg.ErrTimeout after the group timeout when it just stalls.
func TestShmCollectivesPeerGone(t *testing.T) {
	t.Run("closes", func(t *testing.T) {
		gs := newGroups(t, 3, time.Minute, nil)
		if gs[0].shm == nil {
			t.Fatal("shared memory not in use")
		}
		ctx := context.Background()
		works := make([]pg.Work, 2)
		for r := range works {
			works[r] = gs[r].AllGather(ctx, pg.NewTensor(pg.Float32, 3<<21), pg.NewTensor(pg.Float32, 1<<21))
		}
		time.Sleep(100 * time.Millisecond)
		start := time.Now()
		gs[2].Close()
		for r, w := range works {
			wantNames(t, fmt.Sprintf("rank %d", r), w.Wait(ctx), 2, pg.ErrRemote, pg.ErrComm)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the survivors took %v to notice", took)
		}
	})
	t.Run("stalls", func(t *testing.T) {
		gs := newGroups(t, 3, 500*time.Millisecond, nil)
		ctx := context.Background()
		works := make([]pg.Work, 2)
		for r := range works {
			works[r] = gs[r].Broadcast(ctx, pg.NewTensor(pg.Float32, 1<<21), 0)
		}
		errs := []error{works[0].Wait(ctx), works[1].Wait(ctx)}
		// Rank 0 may see rank 1's abort first; one of them times out naming 2.
		var ce *pg.CollectiveError
		if !(errors.As(errs[0], &ce) && ce.Peer == 2 && errors.Is(errs[0], pg.ErrTimeout)) &&
			!(errors.As(errs[1], &ce) && ce.Peer == 2 && errors.Is(errs[1], pg.ErrTimeout)) {
			t.Errorf("got %v and %v, want a timeout naming rank 2", errs[0], errs[1])
		}
	})
}

// TestShmAllReduceSmallSameBits: at and below shm.SmallAllReduceBytes
// every rank folds every rank's input itself; above it each rank folds
// one shard. Both must give, on every rank, the bits of one fold of the
// inputs in rank order (kernel.ReduceN), for SUM and AVG, on 3 ranks.
func TestShmAllReduceSmallSameBits(t *testing.T) {
	const n = 3
	gs := newGroups(t, n, time.Minute, nil)
	if gs[0].shm == nil {
		t.Fatal("shared memory not in use")
	}
	rng := rand.New(rand.NewPCG(7, 11))
	limit := shm.SmallAllReduceBytes / 4
	for _, elems := range []int{1, 7, 1000, limit, limit + 1, 3*limit + 5} {
		for _, op := range []pg.ReduceOp{pg.Op(pg.Sum), pg.Op(pg.Avg)} {
			ins := make([]pg.Tensor, n)
			for r := range ins {
				v := make([]float32, elems)
				for i := range v {
					v[i] = float32(rng.NormFloat64() * 1e3)
				}
				ins[r] = pg.Float32s(v)
			}
			want := make([]pg.Tensor, n)
			for r := range want {
				want[r] = pg.Float32s(slices.Clone(pg.View[float32](ins[r])))
				kernel.Prepare(want[r], op, n)
			}
			kernel.ReduceN(want[:1], want, kernel.BaseKind(op))
			kernel.Finish(want[0], op, n)
			ctx := context.Background()
			errs := each(gs, func(r int, g *Group) error { return g.AllReduce(ctx, ins[r], op).Wait(ctx) })
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
				if !bytes.Equal(ins[r].Data, want[0].Data) {
					t.Errorf("%d elements, %v: rank %d's result differs from the rank-order fold", elems, op, r)
				}
			}
		}
	}
}
