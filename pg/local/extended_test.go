package local_test

import (
	"cmp"
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
	"github.com/goddp/ddp/pg/local"
)

// The tests of pg.Extended's abilities, each against a serial reference.

var extendedSizes = []int{1, 2, 3, 5}

// onAll issues one call per rank and returns each rank's error.
func onAll(t *testing.T, groups []*local.Group, issue func(r int, g *local.Group) pg.Work) []error {
	t.Helper()
	works := make([]pg.Work, len(groups))
	for r, g := range groups {
		works[r] = issue(r, g)
	}
	errs := make([]error, len(groups))
	for r, w := range works {
		errs[r] = wait(t, w)
	}
	return errs
}

// mustAll is onAll that fails the test on any error.
func mustAll(t *testing.T, groups []*local.Group, issue func(r int, g *local.Group) pg.Work) {
	t.Helper()
	for r, err := range onAll(t, groups, issue) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// stillInStep checks that a barrier and an allreduce still work.
func stillInStep(t *testing.T, groups []*local.Group) {
	t.Helper()
	ctx := context.Background()
	mustAll(t, groups, func(r int, g *local.Group) pg.Work { return g.Barrier(ctx) })
	bufs := make([][]float64, len(groups))
	mustAll(t, groups, func(r int, g *local.Group) pg.Work {
		bufs[r] = []float64{float64(r + 1)}
		return g.AllReduce(ctx, pg.Float64s(bufs[r]), pg.Op(pg.Sum))
	})
	n := len(groups)
	for r, b := range bufs {
		if b[0] != float64(n*(n+1)/2) {
			t.Fatalf("rank %d: allreduce after gives %v, want %d", r, b[0], n*(n+1)/2)
		}
	}
}

// val is the test datum of rank r at index i.
func val(r, i int) float64 { return float64(100*r + i + 1) }

func TestExtendedReduce(t *testing.T) {
	ctx := context.Background()
	ops := []pg.ReduceOp{pg.Op(pg.Sum), pg.Op(pg.Max), pg.Op(pg.Min), pg.Op(pg.Product), pg.Op(pg.Avg),
		pg.PremulSumOp(0.5)}
	for _, n := range extendedSizes {
		groups := start(t, n, time.Minute)
		for _, op := range ops {
			for root := range n {
				const l = 7
				bufs := make([][]float64, n)
				ints := make([][]int32, n)
				mustAll(t, groups, func(r int, g *local.Group) pg.Work {
					bufs[r] = make([]float64, l)
					for i := range bufs[r] {
						bufs[r][i] = val(r, i)
					}
					return g.Reduce(ctx, pg.Float64s(bufs[r]), root, op)
				})
				if op.Kind != pg.PremulSum {
					mustAll(t, groups, func(r int, g *local.Group) pg.Work {
						ints[r] = make([]int32, l)
						for i := range ints[r] {
							ints[r][i] = int32(val(r, i))
						}
						return g.Reduce(ctx, pg.Int32s(ints[r]), root, op)
					})
				}
				for r := range n {
					for i := range l {
						want := val(r, i)
						if r == root {
							want = refReduce(op, n, func(j int) float64 { return val(j, i) }, false)
						}
						if d := bufs[r][i] - want; d > 1e-9*want || d < -1e-9*want {
							t.Fatalf("n=%d %v root %d: rank %d float64[%d] = %v, want %v", n, op, root, r, i, bufs[r][i], want)
						}
						if op.Kind == pg.PremulSum {
							continue
						}
						want = val(r, i)
						if r == root {
							want = refReduce(op, n, func(j int) float64 { return val(j, i) }, true)
						}
						if float64(ints[r][i]) != want {
							t.Fatalf("n=%d %v root %d: rank %d int32[%d] = %v, want %v", n, op, root, r, i, ints[r][i], want)
						}
					}
				}
			}
		}
	}
}

// refReduce reduces x(0..n-1) serially with op; integer AVG truncates.
func refReduce(op pg.ReduceOp, n int, x func(int) float64, integer bool) float64 {
	acc := x(0)
	for j := 1; j < n; j++ {
		v := x(j)
		switch op.Kind {
		case pg.Sum, pg.Avg, pg.PremulSum:
			acc += v
		case pg.Max:
			acc = max(acc, v)
		case pg.Min:
			acc = min(acc, v)
		case pg.Product:
			acc *= v
		}
	}
	switch op.Kind {
	case pg.Avg:
		if integer {
			return float64(int64(acc) / int64(n))
		}
		return acc / float64(n)
	case pg.PremulSum:
		return acc * op.Factor
	case pg.Product:
		if integer {
			return float64(int32(int64(acc)))
		}
	}
	return acc
}

func TestExtendedGatherScatter(t *testing.T) {
	ctx := context.Background()
	for _, n := range extendedSizes {
		groups := start(t, n, time.Minute)
		for root := range n {
			for _, l := range []int{0, 1, 5} {
				outs := make([][]float32, n)
				mustAll(t, groups, func(r int, g *local.Group) pg.Work {
					in := make([]float32, l)
					for i := range in {
						in[i] = float32(val(r, i))
					}
					if r == root {
						outs[r] = make([]float32, n*l)
					} else {
						outs[r] = []float32{-1} // not touched, and any length will do
					}
					return g.Gather(ctx, pg.Float32s(outs[r]), pg.Float32s(in), root)
				})
				for r := range n {
					if r != root {
						if outs[r][0] != -1 {
							t.Fatalf("gather n=%d root %d: non-root %d's out changed", n, root, r)
						}
						continue
					}
					for j := range n {
						for i := range l {
							if got := outs[r][j*l+i]; got != float32(val(j, i)) {
								t.Fatalf("gather n=%d root %d l=%d: out[%d] = %v, want %v", n, root, l, j*l+i, got, val(j, i))
							}
						}
					}
				}

				souts := make([][]int64, n)
				mustAll(t, groups, func(r int, g *local.Group) pg.Work {
					var in []int64
					if r == root {
						in = make([]int64, n*l)
						for j := range n {
							for i := range l {
								in[j*l+i] = int64(val(j, i))
							}
						}
					}
					souts[r] = make([]int64, l)
					return g.Scatter(ctx, pg.Int64s(souts[r]), pg.Int64s(in), root)
				})
				for r := range n {
					for i := range l {
						if souts[r][i] != int64(val(r, i)) {
							t.Fatalf("scatter n=%d root %d: rank %d out[%d] = %d, want %v", n, root, r, i, souts[r][i], val(r, i))
						}
					}
				}
			}
		}
	}
}

// splitMatrix is how many elements rank i sends to rank j, zeros included.
func splitMatrix(rng *rand.Rand, n int) [][]int {
	m := make([][]int, n)
	for i := range m {
		m[i] = make([]int, n)
		for j := range m[i] {
			if rng.IntN(3) > 0 {
				m[i][j] = rng.IntN(5)
			}
		}
	}
	return m
}

// runAllToAll runs one alltoall with split matrix m (nil: equal chunks of
// k) and checks every output against the serial reference.
func runAllToAll(t *testing.T, groups []*local.Group, m [][]int, k int) {
	t.Helper()
	n := len(groups)
	cnt := func(i, j int) int {
		if m == nil {
			return k
		}
		return m[i][j]
	}
	outs := make([][]int32, n)
	ins := make([][]int32, n)
	mustAll(t, groups, func(r int, g *local.Group) pg.Work {
		var inS, outS []int
		for j := range n {
			for e := range cnt(r, j) {
				ins[r] = append(ins[r], int32(10000*r+100*j+e))
			}
			inS = append(inS, cnt(r, j))
			outS = append(outS, cnt(j, r))
		}
		total := 0
		for _, c := range outS {
			total += c
		}
		outs[r] = make([]int32, total)
		if m == nil {
			inS, outS = nil, nil
		}
		return g.AllToAll(context.Background(), pg.Int32s(outs[r]), pg.Int32s(ins[r]), outS, inS)
	})
	for r := range n {
		var want []int32
		for i := range n {
			for e := range cnt(i, r) {
				want = append(want, int32(10000*i+100*r+e))
			}
		}
		if !slices.Equal(outs[r], want) {
			t.Fatalf("alltoall n=%d splits %v: rank %d got %v, want %v", n, m, r, outs[r], want)
		}
	}
}

func TestExtendedAllToAll(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range extendedSizes {
		groups := start(t, n, time.Minute)
		for _, k := range []int{0, 1, 3} {
			runAllToAll(t, groups, nil, k)
		}
		for range 20 {
			runAllToAll(t, groups, splitMatrix(rng, n), 0)
		}
		zero := make([][]int, n)
		for i := range zero {
			zero[i] = make([]int, n)
		}
		runAllToAll(t, groups, zero, 0)
	}
}

func TestExtendedAllToAllInPlace(t *testing.T) {
	groups := start(t, 3, time.Minute)
	bufs := make([][]float32, 3)
	mustAll(t, groups, func(r int, g *local.Group) pg.Work {
		bufs[r] = []float32{float32(10 * r), float32(10*r + 1), float32(10*r + 2)}
		b := pg.Float32s(bufs[r])
		return g.AllToAll(context.Background(), b, b, nil, nil)
	})
	for r, b := range bufs {
		if want := []float32{float32(r), float32(10 + r), float32(20 + r)}; !slices.Equal(b, want) {
			t.Errorf("rank %d: got %v, want %v", r, b, want)
		}
	}
}

func TestExtendedAllToAllSplitsMismatch(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 3, time.Minute)
	// Rank 0 sends 1 element to rank 2, which expects 2 from rank 0 and
	// so 1 fewer from rank 1 than rank 1 sends: every rank's own splits
	// sum right; only the pairs disagree.
	inSplits := [][]int{{1, 1, 1}, {1, 1, 1}, {1, 1, 1}}
	outSplits := [][]int{{1, 1, 1}, {1, 1, 1}, {2, 0, 1}}
	errs := onAll(t, groups, func(r int, g *local.Group) pg.Work {
		out := make([]float32, 3, 5)
		return g.AllToAll(ctx, pg.Float32s(out), pg.Float32s([]float32{1, 2, 3}), outSplits[r], inSplits[r])
	})
	for r, err := range errs {
		if !errors.Is(err, pg.ErrMismatch) || !errors.Is(err, pg.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: got %v, want pg.ErrMismatch and pg.ErrInvalidArgument naming rank 2", r, err)
		}
	}
	stillInStep(t, groups)

	// A rank whose split to itself does not match its own.
	errs = onAll(t, groups, func(r int, g *local.Group) pg.Work {
		in, out := []int{1, 1, 1}, []int{1, 1, 1}
		if r == 1 {
			in = []int{0, 2, 1}
		}
		return g.AllToAll(ctx, pg.NewTensor(pg.Float32, 3), pg.NewTensor(pg.Float32, 3), out, in)
	})
	for r, err := range errs {
		if !errors.Is(err, pg.ErrMismatch) || !strings.Contains(err.Error(), "rank 1") {
			t.Errorf("self split, rank %d: got %v, want pg.ErrMismatch naming rank 1", r, err)
		}
	}
	stillInStep(t, groups)
}

func TestExtendedSendRecvTagOrder(t *testing.T) {
	ctx := context.Background()
	for _, n := range extendedSizes[1:] {
		groups := start(t, n, time.Minute)
		// Every rank sends to the next, with two tags interleaved; the
		// receivers post tag 2's recvs first.
		const per = 4
		var sends, recvs []pg.Work
		got := make([][][]float64, n) // [rank][tag-1][i]
		for r, g := range groups {
			dst := (r + 1) % n
			for i := range per {
				for tag := 1; tag <= 2; tag++ {
					w := g.Send(ctx, pg.Float64s([]float64{float64(1000*r + 10*tag + i)}), dst, tag)
					sends = append(sends, w)
					if want := uint64(2*i + tag); w.Seq() != want {
						t.Errorf("rank %d: send #%d has Seq %d, want %d", r, 2*i+tag, w.Seq(), want)
					}
				}
			}
		}
		for r, g := range groups {
			src := (r + n - 1) % n
			got[r] = make([][]float64, 2)
			for _, tag := range []int{2, 1} {
				got[r][tag-1] = make([]float64, per)
				for i := range per {
					recvs = append(recvs, g.Recv(ctx, pg.Float64s(got[r][tag-1][i:i+1]), src, tag))
				}
			}
		}
		for i, w := range append(sends, recvs...) {
			if err := wait(t, w); err != nil {
				t.Fatalf("n=%d work %d: %v", n, i, err)
			}
		}
		for r := range n {
			src := (r + n - 1) % n
			for tag := 1; tag <= 2; tag++ {
				for i := range per {
					if want := float64(1000*src + 10*tag + i); got[r][tag-1][i] != want {
						t.Fatalf("n=%d rank %d tag %d message %d: got %v, want %v", n, r, tag, i, got[r][tag-1][i], want)
					}
				}
			}
		}
		// Point-to-point does not take collective numbers.
		mustAll(t, groups, func(r int, g *local.Group) pg.Work {
			w := g.Barrier(ctx)
			if w.Seq() != 1 {
				t.Errorf("first collective after sends has Seq %d, want 1", w.Seq())
			}
			return w
		})
	}
}

func TestExtendedSendRecvLengthMismatch(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 2, time.Minute)
	s := groups[0].Send(ctx, f32(1, 2, 3), 1, 0)
	r := groups[1].Recv(ctx, pg.NewTensor(pg.Float32, 2), 0, 0)
	wantCollErr(t, "sender", wait(t, s), pg.ErrInvalidArgument, 1)
	err := wait(t, r)
	wantCollErr(t, "receiver", err, pg.ErrInvalidArgument, 0)
	if !strings.Contains(err.Error(), "12 bytes") || !strings.Contains(err.Error(), "8 bytes") {
		t.Errorf("receiver: %v does not give both sizes", err)
	}
	// The pair still works.
	buf := make([]float32, 2)
	s, r = groups[0].Send(ctx, f32(5, 6), 1, 0), groups[1].Recv(ctx, pg.Float32s(buf), 0, 0)
	if err := errors.Join(wait(t, s), wait(t, r)); err != nil {
		t.Fatal(err)
	}
	if buf[0] != 5 || buf[1] != 6 {
		t.Fatalf("got %v, want [5 6]", buf)
	}
}

func TestExtendedSendRecvFailures(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 3, 100*time.Millisecond)
	err := wait(t, groups[0].Recv(ctx, pg.NewTensor(pg.Float32, 1), 2, 7))
	ce := wantCollErr(t, "unmatched recv", err, pg.ErrTimeout, 2)
	if ce.Op != "recv" || !strings.Contains(err.Error(), "tag 7") {
		t.Errorf("got %v, want a recv timeout naming tag 7", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := groups[0].Send(cctx, f32(1), 1, 0)
	cancel()
	if err := wait(t, w); !errors.Is(err, pg.ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled send: got %v", err)
	}
	for _, bad := range []pg.Work{groups[0].Send(ctx, f32(1), 0, 0), groups[0].Send(ctx, f32(1), 3, 0),
		groups[0].Recv(ctx, f32(1), 1, -1)} {
		if err := wait(t, bad); !errors.Is(err, pg.ErrInvalidArgument) || bad.Seq() != 0 {
			t.Errorf("bad call: got %v (Seq %d), want pg.ErrInvalidArgument and Seq 0", err, bad.Seq())
		}
	}
	// A peer that closes fails what waits on it, and what comes later.
	pending := groups[0].Recv(ctx, pg.NewTensor(pg.Float32, 1), 2, 0)
	mine := groups[2].Send(ctx, f32(1), 1, 3)
	if err := groups[2].Close(); err != nil {
		t.Fatal(err)
	}
	wantCollErr(t, "recv from closed", wait(t, pending), pg.ErrRemote, 2)
	wantCollErr(t, "closed rank's own send", wait(t, mine), pg.ErrClosed, pg.NoPeer)
	wantCollErr(t, "send to closed", wait(t, groups[1].Send(ctx, f32(1), 2, 0)), pg.ErrRemote, 2)
}

func TestExtendedCoalesced(t *testing.T) {
	ctx := context.Background()
	for _, n := range extendedSizes {
		groups := start(t, n, time.Minute)
		// AllReduceCoalesced of a float64, an int32 and an empty tensor.
		fs := make([][]float64, n)
		is := make([][]int32, n)
		mustAll(t, groups, func(r int, g *local.Group) pg.Work {
			fs[r] = []float64{val(r, 0), val(r, 1), val(r, 2)}
			is[r] = []int32{int32(val(r, 3)), int32(val(r, 4))}
			w := g.AllReduceCoalesced(ctx, []pg.Tensor{pg.Float64s(fs[r]), pg.Int32s(is[r]), pg.NewTensor(pg.Float32, 0)},
				pg.Op(pg.Avg))
			return w
		})
		for r := range n {
			for i := range 3 {
				if want := refReduce(pg.Op(pg.Avg), n, func(j int) float64 { return val(j, i) }, false); fs[r][i]-want > 1e-9 ||
					want-fs[r][i] > 1e-9 {
					t.Fatalf("allreduce_coalesced n=%d rank %d float[%d] = %v, want %v", n, r, i, fs[r][i], want)
				}
			}
			for i := range 2 {
				if want := refReduce(pg.Op(pg.Avg), n, func(j int) float64 { return val(j, i+3) },
					true); float64(is[r][i]) != want {
					t.Fatalf("allreduce_coalesced n=%d rank %d int[%d] = %v, want %v", n, r, i, is[r][i], want)
				}
			}
		}

		// AllGatherCoalesced and ReduceScatterCoalesced of two tensors.
		gouts := make([][][]float32, n)
		mustAll(t, groups, func(r int, g *local.Group) pg.Work {
			gouts[r] = [][]float32{make([]float32, 2*n), make([]float32, n)}
			ins := []pg.Tensor{f32(float32(val(r, 0)), float32(val(r, 1))), f32(float32(val(r, 2)))}
			return g.AllGatherCoalesced(ctx, []pg.Tensor{pg.Float32s(gouts[r][0]), pg.Float32s(gouts[r][1])}, ins)
		})
		routs := make([][][]int64, n)
		mustAll(t, groups, func(r int, g *local.Group) pg.Work {
			routs[r] = [][]int64{make([]int64, 2), make([]int64, 1)}
			a, b := make([]int64, 2*n), make([]int64, n)
			for i := range a {
				a[i] = int64(val(r, i))
			}
			for i := range b {
				b[i] = int64(val(r, 50+i))
			}
			return g.ReduceScatterCoalesced(ctx, []pg.Tensor{pg.Int64s(routs[r][0]), pg.Int64s(routs[r][1])},
				[]pg.Tensor{pg.Int64s(a), pg.Int64s(b)}, pg.Op(pg.Sum))
		})
		for r := range n {
			for j := range n {
				if gouts[r][0][2*j] != float32(val(j, 0)) || gouts[r][0][2*j+1] != float32(val(j, 1)) ||
					gouts[r][1][j] != float32(val(j, 2)) {
					t.Fatalf("allgather_coalesced n=%d rank %d: got %v", n, r, gouts[r])
				}
			}
			for i := range 2 {
				if want := refReduce(pg.Op(pg.Sum), n, func(j int) float64 { return val(j, 2*r+i) },
					true); float64(routs[r][0][i]) != want {
					t.Fatalf("reducescatter_coalesced n=%d rank %d: got %v, want %v at %d", n, r, routs[r][0], want, i)
				}
			}
			if want := refReduce(pg.Op(pg.Sum), n, func(j int) float64 { return val(j, 50+r) },
				true); float64(routs[r][1][0]) != want {
				t.Fatalf("reducescatter_coalesced n=%d rank %d tensor 1: got %v, want %v", n, r, routs[r][1], want)
			}
		}

		// Through pg.StartCoalescing: one collective, one sequence number.
		bufs := make([][]float32, n)
		var seqs []uint64
		var mu sync.Mutex
		mustAll(t, groups, func(r int, g *local.Group) pg.Work {
			bufs[r] = []float32{1, 2, 3}
			c := pg.StartCoalescing(g)
			c.AllReduce(pg.Float32s(bufs[r][:1]), pg.Op(pg.Sum))
			c.AllReduce(pg.Float32s(bufs[r][1:]), pg.Op(pg.Sum))
			w := c.End(ctx)
			mu.Lock()
			seqs = append(seqs, w.Seq())
			mu.Unlock()
			return w
		})
		for r := range n {
			if want := []float32{float32(n), float32(2 * n), float32(3 * n)}; !slices.Equal(bufs[r], want) {
				t.Fatalf("coalescing n=%d rank %d: got %v, want %v", n, r, bufs[r], want)
			}
		}
		for _, s := range seqs {
			if s != 4 {
				t.Fatalf("coalescing: Seqs %v, want 4 on every rank (the 4th collective)", seqs)
			}
		}
	}
}

func TestExtendedCoalescedMismatch(t *testing.T) {
	ctx := context.Background()
	for name, issue := range map[string]func(r int, g *local.Group) pg.Work{
		"count": func(r int, g *local.Group) pg.Work {
			ts := []pg.Tensor{pg.NewTensor(pg.Float32, 2)}
			if r == 1 {
				ts = append(ts, pg.NewTensor(pg.Float32, 2))
			}
			return g.AllReduceCoalesced(ctx, ts, pg.Op(pg.Sum))
		},
		"dtype": func(r int, g *local.Group) pg.Work {
			d := pg.Float32
			if r == 1 {
				d = pg.Int32
			}
			return g.AllReduceCoalesced(ctx, []pg.Tensor{pg.NewTensor(pg.Float32, 2), pg.NewTensor(d, 2)}, pg.Op(pg.Sum))
		},
		"length": func(r int, g *local.Group) pg.Work {
			l := 1
			if r == 1 {
				l = 2
			}
			return g.AllGatherCoalesced(ctx, []pg.Tensor{pg.NewTensor(pg.Float32, 3*l)},
				[]pg.Tensor{pg.NewTensor(pg.Float32, l)})
		},
		"kind": func(r int, g *local.Group) pg.Work {
			if r == 1 {
				return g.AllReduce(ctx, pg.NewTensor(pg.Float32, 3), pg.Op(pg.Sum))
			}
			return g.ReduceScatterCoalesced(ctx, []pg.Tensor{pg.NewTensor(pg.Float32, 1)},
				[]pg.Tensor{pg.NewTensor(pg.Float32, 3)}, pg.Op(pg.Sum))
		},
	} {
		t.Run(name, func(t *testing.T) {
			groups := start(t, 3, time.Minute)
			for r, err := range onAll(t, groups, issue) {
				if !errors.Is(err, pg.ErrMismatch) || !strings.Contains(err.Error(), "rank 1") {
					t.Errorf("rank %d: got %v, want pg.ErrMismatch naming rank 1", r, err)
				}
			}
			stillInStep(t, groups)
		})
	}
}

func TestExtendedSeqAndCompletionHooks(t *testing.T) {
	ctx := context.Background()
	const n, count = 3, 40
	groups := start(t, n, time.Minute)
	infos := make([][]pg.WorkInfo, n)
	for r, g := range groups {
		g.OnCompletion(func(i pg.WorkInfo) { infos[r] = append(infos[r], i) })
	}
	kinds := []pg.OpType{pg.OpAllReduce, pg.OpBroadcast, pg.OpReduce, pg.OpAllToAll, pg.OpBarrier, pg.OpAllReduceCoalesced}
	works := make([][]pg.Work, n)
	for r, g := range groups {
		for i := range count {
			var w pg.Work
			switch kinds[i%len(kinds)] {
			case pg.OpAllReduce:
				w = g.AllReduce(ctx, f32(1, 2), pg.Op(pg.Sum))
			case pg.OpBroadcast:
				w = g.Broadcast(ctx, f32(1, 2), i%n)
			case pg.OpReduce:
				w = g.Reduce(ctx, f32(1, 2), i%n, pg.Op(pg.Sum))
			case pg.OpAllToAll:
				w = g.AllToAll(ctx, pg.NewTensor(pg.Float32, n), pg.NewTensor(pg.Float32, n), nil, nil)
			case pg.OpBarrier:
				w = g.Barrier(ctx)
			default:
				w = g.AllReduceCoalesced(ctx, []pg.Tensor{f32(1), f32(2, 3)}, pg.Op(pg.Sum))
			}
			if w.Seq() != uint64(i+1) {
				t.Fatalf("rank %d: collective #%d has Seq %d", r, i+1, w.Seq())
			}
			works[r] = append(works[r], w)
		}
	}
	for r := range works {
		for i, w := range works[r] {
			if err := wait(t, w); err != nil {
				t.Fatalf("rank %d #%d: %v", r, i+1, err)
			}
		}
	}
	for _, g := range groups {
		_ = g.Close() // delivers what is pending
	}
	for r := range n {
		if len(infos[r]) != count {
			t.Fatalf("rank %d: %d WorkInfos, want %d", r, len(infos[r]), count)
		}
		for i, info := range infos[r] {
			if info.Seq != uint64(i+1) || info.Op != kinds[i%len(kinds)] || info.Rank != r || info.Err != nil {
				t.Fatalf("rank %d: WorkInfo %d is %+v, want seq %d, op %v", r, i, info, i+1, kinds[i%len(kinds)])
			}
			if info.Issued.IsZero() || info.Started.Before(info.Issued) || info.Finished.Before(info.Started) {
				t.Fatalf("rank %d: WorkInfo %d has times %v %v %v", r, i, info.Issued, info.Started, info.Finished)
			}
			if info.Op == pg.OpAllReduce && (info.Dtype != pg.Float32 || info.InBytes != 8 || info.OutBytes != 8) {
				t.Fatalf("rank %d: allreduce WorkInfo %+v, want float32, 8 bytes in and out", r, info)
			}
			if info.Op == pg.OpAllReduceCoalesced && (info.InBytes != 12 || info.OutBytes != 12) {
				t.Fatalf("rank %d: coalesced WorkInfo %+v, want 12 bytes in and out", r, info)
			}
		}
	}
}

func TestExtendedCompletionHookSeesFailuresAndPointToPoint(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 2, 50*time.Millisecond)
	var mu sync.Mutex
	var got []pg.WorkInfo
	groups[0].OnCompletion(func(i pg.WorkInfo) { mu.Lock(); got = append(got, i); mu.Unlock() })
	_ = wait(t, groups[0].Barrier(ctx)) // times out
	s := groups[0].Send(ctx, f32(1, 2), 1, 0)
	_ = wait(t, groups[1].Recv(ctx, pg.NewTensor(pg.Float32, 2), 0, 0))
	_ = wait(t, s)
	_ = groups[0].Close()
	mu.Lock()
	defer mu.Unlock()
	// The failed barrier's WorkInfo may be delivered after the send's: its
	// Wait returns on the timeout before the group records the failure.
	slices.SortFunc(got, func(a, b pg.WorkInfo) int { return cmp.Compare(a.Issued.UnixNano(), b.Issued.UnixNano()) })
	if len(got) != 2 || got[0].Op != pg.OpBarrier || !errors.Is(got[0].Err, pg.ErrTimeout) || got[1].Op != pg.OpSend ||
		got[1].Seq != 1 || got[1].InBytes != 8 || got[1].Err != nil {
		t.Fatalf("got %+v, want the failed barrier and the send", got)
	}
}

// makeSubgroups calls make on every rank at once and returns the subgroups
// by parent rank, closing them when the test ends.
func makeSubgroups(t *testing.T, groups []*local.Group,
	mk func(r int, g *local.Group) (pg.ProcessGroup, error)) []*local.Group {
	t.Helper()
	subs := make([]*local.Group, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			s, err := mk(r, g)
			errs[r] = err
			if s != nil {
				subs[r] = s.(*local.Group)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range subs {
			if s != nil {
				_ = s.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return subs
}

// members returns the subgroups of the given parent ranks, in order.
func members(subs []*local.Group, ranks ...int) []*local.Group {
	var out []*local.Group
	for _, r := range ranks {
		out = append(out, subs[r])
	}
	return out
}

func TestExtendedSplitAndNewGroup(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 5, time.Minute)
	// Split by parity, ordered by descending parent rank; rank 4 stays out.
	split := makeSubgroups(t, groups, func(r int, g *local.Group) (pg.ProcessGroup, error) {
		color := r % 2
		if r == 4 {
			color = pg.NoColor
		}
		return g.Split(ctx, color, -r)
	})
	if split[4] != nil {
		t.Fatal("rank 4 passed NoColor but got a group")
	}
	for r, want := range map[int][2]int{0: {1, 2}, 2: {0, 2}, 1: {1, 2}, 3: {0, 2}} {
		if s := split[r]; s.Rank() != want[0] || s.Size() != want[1] {
			t.Errorf("parent rank %d: subgroup rank %d size %d, want %v", r, s.Rank(), s.Size(), want)
		}
	}
	// NewGroup in a given order.
	ng := makeSubgroups(t, groups,
		func(r int, g *local.Group) (pg.ProcessGroup, error) { return g.NewGroup(ctx, []int{4, 2, 0}) })
	for r, want := range map[int]int{4: 0, 2: 1, 0: 2} {
		if ng[r].Rank() != want || ng[r].Size() != 3 {
			t.Errorf("new group: parent rank %d has rank %d size %d, want %d of 3", r, ng[r].Rank(), ng[r].Size(), want)
		}
	}
	if ng[1] != nil || ng[3] != nil {
		t.Error("non-members got a new group")
	}

	// Collectives in flight in the parent and both kinds of subgroup at
	// once, the subgroups numbered from 1.
	const rounds = 30
	type job struct {
		w    pg.Work
		buf  []float64
		want float64
	}
	var jobs []job
	issue := func(g *local.Group, x, want float64) {
		b := []float64{x}
		jobs = append(jobs, job{g.AllReduce(ctx, pg.Float64s(b), pg.Op(pg.Sum)), b, want})
	}
	for i := range rounds {
		for r := range 5 {
			issue(groups[r], float64(r+i), float64(10+5*i))
			if split[r] != nil {
				// Evens {0,2}, odds {1,3}.
				issue(split[r], float64(r), float64(2+2*(r%2)))
			}
			if ng[r] != nil {
				issue(ng[r], float64(r*i), float64(6*i))
			}
		}
	}
	for i, j := range jobs {
		if err := wait(t, j.w); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if j.buf[0] != j.want {
			t.Fatalf("job %d: got %v, want %v", i, j.buf[0], j.want)
		}
	}
	mustAll(t, members(split, 0, 2), func(r int, g *local.Group) pg.Work {
		w := g.Barrier(ctx)
		if w.Seq() != rounds+1 {
			t.Errorf("subgroup collective has Seq %d, want %d", w.Seq(), rounds+1)
		}
		return w
	})

	// A subgroup of a subgroup: the new group's ranks 1 and 2 (parent
	// ranks 2 and 0).
	nested := makeSubgroups(t, members(ng, 4, 2, 0), func(r int, g *local.Group) (pg.ProcessGroup, error) {
		return g.NewGroup(ctx, []int{2, 1})
	})
	if nested[0] != nil || nested[1].Rank() != 1 || nested[2].Rank() != 0 {
		t.Fatalf("nested: got %v", nested)
	}
	bufs := [][]float32{{0}, {3}, {4}}
	mustAll(t, nested[1:], func(r int, g *local.Group) pg.Work {
		return g.Broadcast(ctx, pg.Float32s(bufs[r+1]), 1)
	})
	if bufs[1][0] != 3 || bufs[2][0] != 3 {
		t.Errorf("nested broadcast from its rank 1: got %v", bufs)
	}
	stillInStep(t, groups)
}

func TestExtendedSubgroupMismatch(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 3, time.Minute)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() {
			ranks := []int{0, 1}
			if r == 2 {
				ranks = []int{1, 0}
			}
			s, err := g.NewGroup(ctx, ranks)
			if s != nil {
				_ = s.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		if !errors.Is(err, pg.ErrMismatch) || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: got %v, want pg.ErrMismatch naming rank 2", r, err)
		}
	}
	if _, err := groups[0].NewGroup(ctx, []int{0, 0}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("duplicate ranks: got %v", err)
	}
	if _, err := groups[0].Split(ctx, -2, 0); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("color -2: got %v", err)
	}
	stillInStep(t, groups)
}

func TestExtendedDeadRankInSubgroup(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 5, time.Minute)
	// {0,1,2} and {3,4}, numbered by parent rank.
	subs := makeSubgroups(t, groups, func(r int, g *local.Group) (pg.ProcessGroup, error) {
		return g.Split(ctx, r/3, 0)
	})
	// The subgroup with the dead rank, waiting in a collective.
	waiting := []pg.Work{
		subs[0].AllReduce(ctx, f32(1), pg.Op(pg.Sum)),
		subs[2].AllReduce(ctx, f32(1), pg.Op(pg.Sum)),
	}
	// Parent rank 2 is its rank 2; close parent rank 1's member instead,
	// to tell the numberings apart: make it rank 1 of {1,3}.
	pair := makeSubgroups(t, groups, func(r int, g *local.Group) (pg.ProcessGroup, error) {
		return g.NewGroup(ctx, []int{3, 1})
	})
	pw := pair[3].AllReduce(ctx, f32(1), pg.Op(pg.Sum))
	if err := pair[1].Close(); err != nil {
		t.Fatal(err)
	}
	err := wait(t, pw)
	wantCollErr(t, "pair's rank 0", err, pg.ErrRemote, 1)
	if !strings.Contains(err.Error(), "rank 1 (rank 1 of the parent group)") {
		t.Errorf("%v does not name the rank in both numberings", err)
	}
	// Parent rank 1 is rank 1 of the first split group too: close it.
	if err := subs[1].Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range waiting {
		wantCollErr(t, fmt.Sprintf("split member %d", i), wait(t, w), pg.ErrRemote, 1)
	}
	// Later collectives of the broken subgroup fail at once.
	wantCollErr(t, "later", wait(t, subs[2].Barrier(ctx)), pg.ErrRemote, 1)

	// The dead rank named by both numberings: NewGroup([4, 3]) and close
	// parent rank 3, which is rank 1 there.
	rev := makeSubgroups(t, groups, func(r int, g *local.Group) (pg.ProcessGroup, error) {
		return g.NewGroup(ctx, []int{4, 3})
	})
	if err := rev[3].Close(); err != nil {
		t.Fatal(err)
	}
	err = wait(t, rev[4].Barrier(ctx))
	wantCollErr(t, "rev", err, pg.ErrRemote, 1)
	if !strings.Contains(err.Error(), "rank 1 (rank 3 of the parent group)") {
		t.Errorf("%v does not name the rank in both numberings", err)
	}

	// The parent and the other subgroup still work.
	stillInStep(t, groups)
	stillInStep(t, members(subs, 3, 4))
}

func TestExtendedMixedInFlight(t *testing.T) {
	ctx := context.Background()
	const n, rounds = 3, 100
	groups := start(t, n, time.Minute)
	type check func() error
	var works []pg.Work
	var checks []check
	for i := range rounds {
		for r, g := range groups {
			switch i % 5 {
			case 0:
				b := []float32{float32(r)}
				works = append(works, g.Reduce(ctx, pg.Float32s(b), i%n, pg.Op(pg.Sum)))
				if r == i%n {
					checks = append(checks, func() error {
						if b[0] != 3 {
							return fmt.Errorf("reduce #%d: %v", i, b)
						}
						return nil
					})
				}
			case 1:
				out := make([]int32, n)
				in := make([]int32, n)
				for j := range in {
					in[j] = int32(10*r + j)
				}
				works = append(works, g.AllToAll(ctx, pg.Int32s(out), pg.Int32s(in), nil, nil))
				checks = append(checks, func() error {
					for j := range out {
						if out[j] != int32(10*j+r) {
							return fmt.Errorf("alltoall #%d rank %d: %v", i, r, out)
						}
					}
					return nil
				})
			case 2:
				out := make([]float64, n)
				works = append(works, g.Gather(ctx, pg.Float64s(out), pg.Float64s([]float64{float64(r)}), 0))
				if r == 0 {
					checks = append(checks, func() error {
						if out[0] != 0 || out[n-1] != n-1 {
							return fmt.Errorf("gather #%d: %v", i, out)
						}
						return nil
					})
				}
			case 3:
				b := []float32{0}
				works = append(works, g.Send(ctx, pg.Float32s([]float32{float32(r)}), (r+1)%n, i),
					g.Recv(ctx, pg.Float32s(b), (r+n-1)%n, i))
				checks = append(checks, func() error {
					if b[0] != float32((r+n-1)%n) {
						return fmt.Errorf("recv #%d rank %d: %v", i, r, b)
					}
					return nil
				})
			default:
				works = append(works, g.AllReduceCoalesced(ctx, []pg.Tensor{f32(1), f32(1, 1)}, pg.Op(pg.Sum)))
			}
		}
	}
	for i, w := range works {
		if err := wait(t, w); err != nil {
			t.Fatalf("work %d: %v", i, err)
		}
	}
	for _, c := range checks {
		if err := c(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestExtendedAbortInSubgroup(t *testing.T) {
	ctx := context.Background()
	groups := start(t, 4, time.Minute)
	// Two subgroups that share parent rank 2: {2, 0} and {1, 2, 3}.
	a := makeSubgroups(t, groups,
		func(r int, g *local.Group) (pg.ProcessGroup, error) { return g.NewGroup(ctx, []int{2, 0}) })
	b := makeSubgroups(t, groups,
		func(r int, g *local.Group) (pg.ProcessGroup, error) { return g.NewGroup(ctx, []int{1, 2, 3}) })
	waiting := a[2].AllReduce(ctx, f32(1), pg.Op(pg.Sum))
	a[0].Abort(errors.New("disk full"))
	err := wait(t, waiting)
	wantCollErr(t, "a's rank 0", err, pg.ErrRemote, 1)
	if !strings.Contains(err.Error(), "rank 1 (rank 0 of the parent group)") ||
		!strings.Contains(err.Error(), "disk full") {
		t.Errorf("%v does not name the rank in both numberings with the cause", err)
	}
	wantCollErr(t, "aborted rank", wait(t, a[0].Barrier(ctx)), pg.ErrAborted, pg.NoPeer)
	// The sibling that shares parent rank 2, and the parent, go on.
	stillInStep(t, members(b, 1, 2, 3))
	stillInStep(t, groups)
}
