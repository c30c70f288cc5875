//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/pgtest"
)

// input is rank r's seeded tensor of n elements of d: small values, so
// that products and sums stay exact.
func input(d pg.Dtype, r, n, salt int) pg.Tensor {
	t := pg.NewTensor(d, n)
	rng := rand.New(rand.NewPCG(uint64(r), uint64(n*131+salt)))
	for i := 0; i < n; i++ {
		v := rng.IntN(5) - 2
		switch d {
		case pg.Float32:
			pg.View[float32](t)[i] = float32(v) / 2
		case pg.Float64:
			pg.View[float64](t)[i] = float64(v) / 4
		case pg.Float16:
			pg.View[uint16](t)[i] = backend.F32ToF16(float32(v) / 2)
		case pg.BFloat16:
			pg.View[uint16](t)[i] = backend.F32ToBF16(float32(v) / 2)
		case pg.Int32:
			pg.View[int32](t)[i] = int32(v)
		case pg.Int64:
			pg.View[int64](t)[i] = int64(v)
		case pg.Uint8:
			t.Data[i] = uint8(v + 3)
		}
	}
	return t
}

func inputs(d pg.Dtype, size, n, salt int) []pg.Tensor {
	ins := make([]pg.Tensor, size)
	for r := range ins {
		ins[r] = input(d, r, n, salt)
	}
	return ins
}

func ops(d pg.Dtype) []pg.ReduceOp {
	var out []pg.ReduceOp
	for _, k := range []pg.ReduceKind{pg.Sum, pg.Avg, pg.Product, pg.Min, pg.Max, pg.Band, pg.Bor, pg.Bxor} {
		if pg.Op(k).Check(d) == nil {
			out = append(out, pg.Op(k))
		}
	}
	if pg.PremulSumOp(0.5).Check(d) == nil {
		out = append(out, pg.PremulSumOp(0.5))
	}
	return out
}

func wait(t *testing.T, w pg.Work) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := w.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

func compare(t *testing.T, what string, got, want pg.Tensor, size int) {
	t.Helper()
	if err := pgtest.Compare(got, want, pgtest.Tolerance(got.Dtype, size)); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

var lengths = []int{0, 1, 7, 1000, 65537}

func TestAllReduceEveryDtypeAndOp(t *testing.T) {
	g := tw.g
	for _, d := range pg.Dtypes() {
		for _, op := range ops(d) {
			for _, n := range lengths {
				ins := inputs(d, g.Size(), n, int(op.Kind))
				want, err := pgtest.Reduce(ins, op)
				if err != nil {
					t.Fatal(err)
				}
				got := input(d, g.Rank(), n, int(op.Kind))
				wait(t, g.AllReduce(context.Background(), got, op))
				compare(t, fmt.Sprintf("allreduce %v %v n=%d", d, op, n), got, want, g.Size())
				// Every rank ends with the same bits.
				all := pg.NewTensor(d, n*g.Size())
				wait(t, g.AllGather(context.Background(), all, got))
				for r := 0; r < g.Size(); r++ {
					if !slices.Equal(all.Data[r*len(got.Data):(r+1)*len(got.Data)], got.Data) {
						t.Fatalf("allreduce %v %v n=%d: rank %d's result differs from rank %d's", d, op, n, r, g.Rank())
					}
				}
			}
		}
	}
}

func TestRootedAndScatteringCollectives(t *testing.T) {
	g := tw.g
	ctx := context.Background()
	size, rank := g.Size(), g.Rank()
	for _, d := range pg.Dtypes() {
		for _, n := range []int{0, 1, 7, 1000} {
			for root := 0; root < size; root++ {
				// Broadcast.
				b := input(d, rank, n, 1)
				wait(t, g.Broadcast(ctx, b, root))
				compare(t, "broadcast", b, input(d, root, n, 1), size)
				// Reduce, every op.
				for _, op := range ops(d) {
					ins := inputs(d, size, n, 2)
					x := input(d, rank, n, 2)
					wait(t, g.Reduce(ctx, x, root, op))
					if rank == root {
						want, _ := pgtest.Reduce(ins, op)
						compare(t, fmt.Sprintf("reduce %v %v root %d", d, op, root), x, want, size)
					} else {
						compare(t, "reduce leaves non-roots alone", x, ins[rank], size)
					}
				}
				// Gather.
				var out pg.Tensor
				if rank == root {
					out = pg.NewTensor(d, n*size)
				}
				wait(t, g.Gather(ctx, out, input(d, rank, n, 3), root))
				if rank == root {
					want, _ := pgtest.Gather(inputs(d, size, n, 3))
					compare(t, "gather", out, want, size)
				}
				// Scatter.
				var in pg.Tensor
				if rank == root {
					in = input(d, root, n*size, 4)
				}
				got := pg.NewTensor(d, n)
				wait(t, g.Scatter(ctx, got, in, root))
				parts, _ := pgtest.Scatter(input(d, root, n*size, 4), size)
				compare(t, "scatter", got, parts[rank], size)
			}
			// AllGather.
			all := pg.NewTensor(d, n*size)
			wait(t, g.AllGather(ctx, all, input(d, rank, n, 5)))
			want, _ := pgtest.Gather(inputs(d, size, n, 5))
			compare(t, "allgather", all, want, size)
			// ReduceScatter, every op.
			for _, op := range ops(d) {
				out := pg.NewTensor(d, n)
				wait(t, g.ReduceScatter(ctx, out, input(d, rank, n*size, 6), op))
				red, _ := pgtest.Reduce(inputs(d, size, n*size, 6), op)
				compare(t, fmt.Sprintf("reducescatter %v %v", d, op), out, red.Slice(rank*n, (rank+1)*n), size)
			}
		}
	}
}

// splits are the seeded alltoall splits: splits[i][j] elements from i to j.
func splits(size, seed int) [][]int {
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	s := make([][]int, size)
	for i := range s {
		s[i] = make([]int, size)
		for j := range s[i] {
			s[i][j] = rng.IntN(5)
		}
	}
	return s
}

func TestAllToAll(t *testing.T) {
	g := tw.g
	size, rank := g.Size(), g.Rank()
	for _, d := range pg.Dtypes() {
		for seed := 0; seed < 3; seed++ {
			sp := splits(size, seed)
			ins := make([]pg.Tensor, size)
			for r := range ins {
				total := 0
				for _, c := range sp[r] {
					total += c
				}
				ins[r] = input(d, r, total, seed)
			}
			want, err := pgtest.AllToAll(ins, sp)
			if err != nil {
				t.Fatal(err)
			}
			outSplits := make([]int, size)
			for i := range outSplits {
				outSplits[i] = sp[i][rank]
			}
			out := pg.NewTensor(d, want[rank].Len())
			wait(t, g.AllToAll(context.Background(), out, ins[rank], outSplits, sp[rank]))
			compare(t, "alltoall", out, want[rank], size)
		}
		// Equal chunks.
		in := input(d, rank, 3*size, 9)
		out := pg.NewTensor(d, 3*size)
		wait(t, g.AllToAll(context.Background(), out, in, nil, nil))
		for src := 0; src < size; src++ {
			compare(t, "alltoall equal", out.Slice(3*src, 3*src+3), input(d, src, 3*size, 9).Slice(3*rank, 3*rank+3), size)
		}
	}
}

func TestSendRecvRingPerTagOrder(t *testing.T) {
	g := tw.g
	size, rank := g.Size(), g.Rank()
	if size == 1 {
		t.Skip("needs two ranks")
	}
	ctx := context.Background()
	next, prev := (rank+1)%size, (rank+size-1)%size
	const tags, msgs = 3, 4
	var works []pg.Work
	var got []pg.Tensor
	// Receives posted tag-descending, sends tag-ascending: per-tag FIFO
	// still holds, and a message on one tag does not hold up another.
	for tag := tags - 1; tag >= 0; tag-- {
		for m := 0; m < msgs; m++ {
			r := pg.NewTensor(pg.Int64, 5)
			got = append(got, r)
			works = append(works, g.Recv(ctx, r, prev, tag))
		}
	}
	// A collective in the middle, issued at the same point on every rank.
	sum := pg.Int64s([]int64{int64(rank)})
	works = append(works, g.AllReduce(ctx, sum, pg.Op(pg.Sum)))
	for tag := 0; tag < tags; tag++ {
		for m := 0; m < msgs; m++ {
			works = append(works, g.Send(ctx, pg.Int64s([]int64{int64(rank), int64(tag), int64(m), 0, 0}), next, tag))
		}
	}
	for _, w := range works {
		wait(t, w)
	}
	i := 0
	for tag := tags - 1; tag >= 0; tag-- {
		for m := 0; m < msgs; m++ {
			if v := pg.View[int64](got[i]); v[0] != int64(prev) || v[1] != int64(tag) || v[2] != int64(m) {
				t.Fatalf("recv %d from rank %d tag %d: got %v", m, prev, tag, v)
			}
			i++
		}
	}
	if want := int64(size * (size - 1) / 2); pg.View[int64](sum)[0] != want {
		t.Fatalf("allreduce amid send/recv: %d, want %d", pg.View[int64](sum)[0], want)
	}
	// A receive of the wrong size fails with ErrInvalidArgument.
	var w pg.Work
	if rank == 0 {
		w = g.Send(ctx, pg.NewTensor(pg.Uint8, 16), 1, 99)
		wait(t, w)
	} else if rank == 1 {
		err := g.Recv(ctx, pg.NewTensor(pg.Uint8, 8), 0, 99).Wait(ctx)
		if !errors.Is(err, pg.ErrInvalidArgument) {
			t.Fatalf("short recv: %v, want ErrInvalidArgument", err)
		}
	}
	wait(t, g.Barrier(ctx))
}

func TestCoalescedAndSeqAndHooks(t *testing.T) {
	g := tw.g
	ctx := context.Background()
	size, rank := g.Size(), g.Rank()
	var mu sync.Mutex
	var infos []pg.WorkInfo
	// A fresh subgroup of everyone, for numbering from 1 and its own hooks.
	sub, err := g.Split(ctx, 0, rank)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ext := sub.(pg.Extended)
	ext.OnCompletion(func(i pg.WorkInfo) { mu.Lock(); infos = append(infos, i); mu.Unlock() })
	ds := []pg.Dtype{pg.Float32, pg.Int64, pg.BFloat16}
	ts := make([]pg.Tensor, len(ds))
	for i, d := range ds {
		ts[i] = input(d, rank, 100+i, 11)
	}
	w1 := ext.AllReduceCoalesced(ctx, ts, pg.Op(pg.Max))
	outs := []pg.Tensor{pg.NewTensor(pg.Int32, 3*size), pg.NewTensor(pg.Float64, 2*size)}
	ins := []pg.Tensor{input(pg.Int32, rank, 3, 12), input(pg.Float64, rank, 2, 12)}
	w2 := ext.AllGatherCoalesced(ctx, outs, ins)
	rs := []pg.Tensor{pg.NewTensor(pg.Float32, 4)}
	w3 := ext.ReduceScatterCoalesced(ctx, rs, []pg.Tensor{input(pg.Float32, rank, 4*size, 13)}, pg.Op(pg.Sum))
	w4 := ext.Barrier(ctx)
	bad := ext.AllReduce(ctx, pg.Float32s(make([]float32, 2)), pg.Op(pg.Band))
	for i, w := range []pg.Work{w1, w2, w3, w4} {
		wait(t, w)
		if w.Seq() != uint64(i+1) {
			t.Fatalf("work %d has seq %d", i, w.Seq())
		}
	}
	if bad.Seq() != 0 || !errors.Is(bad.Err(), pg.ErrInvalidArgument) {
		t.Fatalf("refused call: seq %d err %v", bad.Seq(), bad.Err())
	}
	for i, d := range ds {
		want, _ := pgtest.Reduce(inputs(d, size, 100+i, 11), pg.Op(pg.Max))
		compare(t, "allreduce_coalesced", ts[i], want, size)
	}
	want0, _ := pgtest.Gather(inputs(pg.Int32, size, 3, 12))
	compare(t, "allgather_coalesced", outs[0], want0, size)
	red, _ := pgtest.Reduce(inputs(pg.Float32, size, 4*size, 13), pg.Op(pg.Sum))
	compare(t, "reduce_scatter_coalesced", rs[0], red.Slice(4*rank, 4*rank+4), size)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(infos)
		mu.Unlock()
		if n >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(infos) != 4 {
		t.Fatalf("hooks saw %d works, want 4", len(infos))
	}
	// Hooks run in completion order; MPI may finish them in any order.
	slices.SortFunc(infos, func(a, b pg.WorkInfo) int { return int(a.Seq) - int(b.Seq) })
	wantOps := []pg.OpType{pg.OpAllReduceCoalesced, pg.OpAllGatherCoalesced, pg.OpReduceScatterCoalesced, pg.OpBarrier}
	for i, info := range infos {
		if info.Op != wantOps[i] || info.Seq != uint64(i+1) || info.Rank != rank || info.Err != nil {
			t.Fatalf("hook %d: %+v", i, info)
		}
	}
}

func TestSplitAndNewGroup(t *testing.T) {
	g := tw.g
	ctx := context.Background()
	size, rank := g.Size(), g.Rank()
	// Evens and odds, ordered by descending key.
	sub, err := g.Split(ctx, rank%2, -rank)
	if err != nil {
		t.Fatal(err)
	}
	var members []int
	for r := size - 1; r >= 0; r-- {
		if r%2 == rank%2 {
			members = append(members, r)
		}
	}
	if sub.Size() != len(members) || members[sub.Rank()] != rank {
		t.Fatalf("split: rank %d of %d, members %v", sub.Rank(), sub.Size(), members)
	}
	// The parent and the subgroup in flight at once.
	x := pg.Int64s([]int64{int64(rank)})
	y := pg.Int64s([]int64{int64(rank)})
	wx := sub.AllReduce(ctx, x, pg.Op(pg.Sum))
	wy := g.AllReduce(ctx, y, pg.Op(pg.Sum))
	wait(t, wx)
	wait(t, wy)
	var want int64
	for _, m := range members {
		want += int64(m)
	}
	if pg.View[int64](x)[0] != want || pg.View[int64](y)[0] != int64(size*(size-1)/2) {
		t.Fatalf("split allreduce %d (want %d), parent %d", pg.View[int64](x)[0], want, pg.View[int64](y)[0])
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	// NewGroup of the last rank and rank 0, in that order.
	ranks := []int{size - 1}
	if size > 1 {
		ranks = append(ranks, 0)
	}
	ng, err := g.NewGroup(ctx, ranks)
	if err != nil {
		t.Fatal(err)
	}
	idx := slices.Index(ranks, rank)
	if idx < 0 {
		if ng != nil {
			t.Fatalf("non-member got %v", ng)
		}
		return
	}
	defer ng.Close()
	if ng.Rank() != idx || ng.Size() != len(ranks) {
		t.Fatalf("new group: rank %d of %d, want %d of %d", ng.Rank(), ng.Size(), idx, len(ranks))
	}
	z := pg.Int32s([]int32{int32(rank + 1)})
	wait(t, ng.AllReduce(ctx, z, pg.Op(pg.Product)))
	if want := int32(size) * int32(min(size, 2)-1+1); size > 1 && pg.View[int32](z)[0] != int32(size) || size == 1 &&
		pg.View[int32](z)[0] != 1 {
		t.Fatalf("new group product %d (%d)", pg.View[int32](z)[0], want)
	}
	if _, err := g.NewGroup(ctx, []int{0, 0}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("duplicate ranks: %v", err)
	}
}

func TestInFlight(t *testing.T) {
	g := tw.g
	ctx := context.Background()
	size, rank := g.Size(), g.Rank()
	rng := rand.New(rand.NewPCG(42, 0)) // the same draws on every rank
	type check func()
	var works []pg.Work
	var checks []check
	for i := 0; i < 32; i++ {
		n := rng.IntN(3000)
		switch rng.IntN(4) {
		case 0:
			x := input(pg.Float32, rank, n, i)
			works = append(works, g.AllReduce(ctx, x, pg.Op(pg.Sum)))
			checks = append(checks, func() {
				want, _ := pgtest.Reduce(inputs(pg.Float32, size, n, i), pg.Op(pg.Sum))
				compare(t, "inflight allreduce", x, want, size)
			})
		case 1:
			x := input(pg.Int32, rank, n, i)
			root := rng.IntN(size)
			works = append(works, g.Broadcast(ctx, x, root))
			checks = append(checks, func() { compare(t, "inflight broadcast", x, input(pg.Int32, root, n, i), size) })
		case 2:
			out := pg.NewTensor(pg.Float16, n*size)
			works = append(works, g.AllGather(ctx, out, input(pg.Float16, rank, n, i)))
			checks = append(checks, func() {
				want, _ := pgtest.Gather(inputs(pg.Float16, size, n, i))
				compare(t, "inflight allgather", out, want, size)
			})
		default:
			works = append(works, g.Barrier(ctx))
		}
	}
	for _, w := range works {
		wait(t, w)
	}
	for _, c := range checks {
		c()
	}
}

func TestMonitoredBarrier(t *testing.T) {
	g := tw.g
	if err := g.MonitoredBarrier(context.Background(), time.Minute, true); err != nil {
		t.Fatal(err)
	}
	if g.Size() < 2 {
		return
	}
	// Rank 1 stays away: rank 0 names it after the timeout, rank 1 then
	// arrives late and times out waiting for rank 0's release, naming 0.
	var err error
	if g.Rank() != 1 {
		err = g.MonitoredBarrier(context.Background(), 500*time.Millisecond, true)
	} else {
		time.Sleep(1500 * time.Millisecond)
	}
	var missing *pg.MissingRanksError
	if g.Rank() == 0 && (!errors.As(err, &missing) || !slices.Equal(missing.Missing, []int{1})) {
		t.Fatalf("rank 0: %v, want ranks [1] missing", err)
	}
	wait(t, g.Barrier(context.Background()))
}

// TestAbortFailsWorkAtOnce: rank 0 aborts a subgroup with an allreduce in
// flight that rank 1 has not joined; the Work fails with pg.ErrAborted at
// once and later calls are refused. Rank 1 then issues its half, so that
// the abandoned MPI request completes and the job can finalise.
func TestAbortFailsWorkAtOnce(t *testing.T) {
	g := tw.g
	if g.Size() < 2 {
		t.Skip("needs two ranks")
	}
	ctx := context.Background()
	sub, err := g.Split(ctx, 0, g.Rank())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	x := pg.Float32s([]float32{1, 2, 3})
	switch g.Rank() {
	case 0:
		w := sub.AllReduce(ctx, x, pg.Op(pg.Sum))
		sub.Abort(errors.New("test abort"))
		select {
		case <-w.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the aborted Work did not finish")
		}
		if !errors.Is(w.Err(), pg.ErrAborted) || !strings.Contains(w.Err().Error(), "test abort") {
			t.Fatalf("aborted work: %v", w.Err())
		}
		if err := sub.Barrier(ctx).Wait(ctx); !errors.Is(err, pg.ErrAborted) {
			t.Fatalf("barrier after abort: %v", err)
		}
		wait(t, g.Barrier(ctx)) // the parent goes on
	case 1:
		wait(t, g.Barrier(ctx))
		wait(t, sub.AllReduce(ctx, x, pg.Op(pg.Sum)))
	default:
		wait(t, g.Barrier(ctx))
		wait(t, sub.AllReduce(ctx, x, pg.Op(pg.Sum)))
	}
	// Rank 0's abandoned request completes now; drain the parent.
	wait(t, g.Barrier(ctx))
}
