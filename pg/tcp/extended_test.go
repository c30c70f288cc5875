package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// The tests of the pg.Extended methods: each op on world sizes 1 to 4
// against a serial reference, with a tiny chunk so that tensors span
// many frames. Values are small integers, exact in every dtype used.

func extGroups(t *testing.T, n int) []*Group {
	return newGroups(t, n, time.Minute, func(o *Options) { o.ChunkBytes = 64; o.RingThreshold = 256 })
}

func waitAll(t *testing.T, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// val is rank r's element i.
func val(r, i int) int64 { return int64((r+1)*1000 + i) }

func filled(r, length int) []int64 {
	s := make([]int64, length)
	for i := range s {
		s[i] = val(r, i)
	}
	return s
}

func TestExtendedRooted(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for _, length := range []int{0, 1, 7, 100} {
			t.Run(fmt.Sprintf("world=%d/len=%d", n, length), func(t *testing.T) {
				gs := extGroups(t, n)
				ctx := ctx30(t)
				for root := range n {
					// Reduce: root gets the sum; the others' t is unchanged.
					bufs := make([][]int64, n)
					waitAll(t, "reduce", each(gs, func(r int, g *Group) error {
						bufs[r] = filled(r, length)
						w := g.Reduce(ctx, pg.Int64s(bufs[r]), root, pg.Op(pg.Sum))
						return w.Wait(ctx)
					}))
					for r := range n {
						for i := range length {
							want := val(r, i)
							if r == root {
								want = 0
								for q := range n {
									want += val(q, i)
								}
							}
							if bufs[r][i] != want {
								t.Fatalf("reduce root %d: rank %d element %d = %d, want %d", root, r, i, bufs[r][i], want)
							}
						}
					}
					// Avg scales a copy: non-root float inputs stay as they were.
					fl := make([][]float64, n)
					waitAll(t, "reduce avg", each(gs, func(r int, g *Group) error {
						fl[r] = make([]float64, length)
						for i := range fl[r] {
							fl[r][i] = float64(val(r, i))
						}
						return g.Reduce(ctx, pg.Float64s(fl[r]), root, pg.Op(pg.Avg)).Wait(ctx)
					}))
					for r := range n {
						for i := range length {
							want := float64(val(r, i))
							if r == root {
								want = 0
								for q := range n {
									want += float64(val(q, i))
								}
								want /= float64(n)
							}
							if d := fl[r][i] - want; d > 1e-9 || d < -1e-9 {
								t.Fatalf("reduce avg root %d: rank %d element %d = %v, want %v", root, r, i, fl[r][i], want)
							}
						}
					}

					// Gather.
					outs := make([][]int64, n)
					waitAll(t, "gather", each(gs, func(r int, g *Group) error {
						if r == root {
							outs[r] = make([]int64, n*length)
						}
						return g.Gather(ctx, pg.Int64s(outs[r]), pg.Int64s(filled(r, length)), root).Wait(ctx)
					}))
					for q := range n {
						for i := range length {
							if got := outs[root][q*length+i]; got != val(q, i) {
								t.Fatalf("gather root %d: element %d of rank %d = %d, want %d", root, i, q, got, val(q, i))
							}
						}
					}

					// Scatter.
					got := make([][]int64, n)
					waitAll(t, "scatter", each(gs, func(r int, g *Group) error {
						var in []int64
						if r == root {
							in = make([]int64, n*length)
							for q := range n {
								copy(in[q*length:], filled(q, length))
							}
						}
						got[r] = make([]int64, length)
						return g.Scatter(ctx, pg.Int64s(got[r]), pg.Int64s(in), root).Wait(ctx)
					}))
					for r := range n {
						if !slices.Equal(got[r], filled(r, length)) {
							t.Fatalf("scatter root %d: rank %d got %v, want %v", root, r, got[r], filled(r, length))
						}
					}
				}
			})
		}
	}
}

// a2aSplits is how many elements rank i sends rank j: uneven, with zeros.
func a2aSplits(i, j int) int { return (i*3 + j*5) % 4 }

func TestExtendedAllToAll(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			gs := extGroups(t, n)
			ctx := ctx30(t)
			// Equal chunks: rank r sends element r*100+j*10+e to rank j.
			const k = 20
			outs := make([][]int64, n)
			waitAll(t, "equal", each(gs, func(r int, g *Group) error {
				in := make([]int64, n*k)
				for j := range n {
					for e := range k {
						in[j*k+e] = int64(r*100000 + j*1000 + e)
					}
				}
				outs[r] = make([]int64, n*k)
				return g.AllToAll(ctx, pg.Int64s(outs[r]), pg.Int64s(in), nil, nil).Wait(ctx)
			}))
			for r := range n {
				for i := range n {
					for e := range k {
						if got, want := outs[r][i*k+e], int64(i*100000+r*1000+e); got != want {
							t.Fatalf("equal: rank %d chunk %d element %d = %d, want %d", r, i, e, got, want)
						}
					}
				}
			}
			// Uneven, with empty chunks, several frames long.
			for _, scale := range []int{1, 13} {
				outs := make([][]int64, n)
				waitAll(t, "uneven", each(gs, func(r int, g *Group) error {
					inS, outS := make([]int, n), make([]int, n)
					var in []int64
					for j := range n {
						inS[j] = scale * a2aSplits(r, j)
						outS[j] = scale * a2aSplits(j, r)
						for e := range inS[j] {
							in = append(in, int64(r*100000+j*1000+e))
						}
					}
					outs[r] = make([]int64, sum(outS))
					return g.AllToAll(ctx, pg.Int64s(outs[r]), pg.Int64s(in), outS, inS).Wait(ctx)
				}))
				for r := range n {
					var want []int64
					for i := range n {
						for e := range scale * a2aSplits(i, r) {
							want = append(want, int64(i*100000+r*1000+e))
						}
					}
					if !slices.Equal(outs[r], want) {
						t.Fatalf("uneven x%d: rank %d got %v, want %v", scale, r, outs[r], want)
					}
				}
			}
		})
	}
}

func sum(s []int) int {
	t := 0
	for _, v := range s {
		t += v
	}
	return t
}

// TestAllToAllMismatchedSplits: rank 1 expects 3 elements from rank 0,
// which sends 2. Rank 1 fails naming rank 0, with a message that says
// which split is wrong; nothing is written out of range, and nobody hangs.
func TestAllToAllMismatchedSplits(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	outs := [][]int64{make([]int64, 4), make([]int64, 5)}
	guard := make([]int64, 4) // rank 1's out is a window of a larger buffer
	rank1 := make([]int64, 5+len(guard))
	outs[1] = rank1[:5:5]
	errs := each(gs, func(r int, g *Group) error {
		var in []int64
		var inS, outS []int
		if r == 0 {
			in, inS, outS = []int64{1, 2, 3, 4}, []int{2, 2}, []int{2, 2}
		} else {
			in, inS, outS = []int64{5, 6, 7, 8}, []int{2, 2}, []int{3, 2}
		}
		return g.AllToAll(ctx, pg.Int64s(outs[r]), pg.Int64s(in), outS, inS).Wait(ctx)
	})
	wantNames(t, "rank 1", errs[1], 0, pg.ErrMismatch)
	if errs[1] != nil && !strings.Contains(errs[1].Error(), "split") {
		t.Errorf("rank 1's error does not say which split: %v", errs[1])
	}
	if errs[0] == nil { // rank 0 got all it expected; it learns at its next collective
		errs[0] = gs[0].Barrier(ctx).Wait(ctx)
	}
	wantNames(t, "rank 0", errs[0], 1, pg.ErrRemote, pg.ErrComm)
	if !slices.Equal(rank1[5:], guard) {
		t.Errorf("rank 1's buffer was written past its output: %v", rank1)
	}
}

func TestExtendedCoalesced(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			gs := extGroups(t, n)
			ctx := ctx30(t)
			lens := []int{5, 0, 33, 1}
			// Allreduce, mixed dtypes: int64 and float32 tensors.
			got := make([][]pg.Tensor, n)
			var seqs [][]uint64 = make([][]uint64, n)
			waitAll(t, "allreduce_coalesced", each(gs, func(r int, g *Group) error {
				for i, l := range lens {
					if i%2 == 0 {
						got[r] = append(got[r], pg.Int64s(filled(r, l)))
					} else {
						f := make([]float32, l)
						for e := range f {
							f[e] = float32(val(r, e))
						}
						got[r] = append(got[r], pg.Float32s(f))
					}
				}
				before := g.Barrier(ctx)
				w := g.AllReduceCoalesced(ctx, got[r], pg.Op(pg.Sum))
				after := g.Barrier(ctx)
				seqs[r] = []uint64{before.Seq(), w.Seq(), after.Seq()}
				return pg.WaitAll(ctx, before, w, after)
			}))
			for r := range n {
				if seqs[r][1] != seqs[r][0]+1 || seqs[r][2] != seqs[r][1]+1 {
					t.Errorf("rank %d: seqs around a coalesced allreduce %v, want consecutive", r, seqs[r])
				}
				for i, l := range lens {
					for e := range l {
						var want int64
						for q := range n {
							want += val(q, e)
						}
						var have int64
						if i%2 == 0 {
							have = pg.View[int64](got[r][i])[e]
						} else {
							have = int64(pg.View[float32](got[r][i])[e])
						}
						if have != want {
							t.Fatalf("allreduce_coalesced: rank %d tensor %d element %d = %d, want %d", r, i, e, have, want)
						}
					}
				}
			}
			// Allgather and reduce-scatter.
			outs := make([][][]int64, n)
			waitAll(t, "allgather_coalesced", each(gs, func(r int, g *Group) error {
				var os, is []pg.Tensor
				for _, l := range lens {
					outs[r] = append(outs[r], make([]int64, n*l))
					os = append(os, pg.Int64s(outs[r][len(outs[r])-1]))
					is = append(is, pg.Int64s(filled(r, l)))
				}
				return g.AllGatherCoalesced(ctx, os, is).Wait(ctx)
			}))
			for r := range n {
				for i, l := range lens {
					for q := range n {
						if !slices.Equal(outs[r][i][q*l:(q+1)*l], filled(q, l)) {
							t.Fatalf("allgather_coalesced: rank %d tensor %d segment %d = %v", r, i, q, outs[r][i][q*l:(q+1)*l])
						}
					}
				}
			}
			rs := make([][][]int64, n)
			waitAll(t, "reducescatter_coalesced", each(gs, func(r int, g *Group) error {
				var os, is []pg.Tensor
				for _, l := range lens {
					rs[r] = append(rs[r], make([]int64, l))
					os = append(os, pg.Int64s(rs[r][len(rs[r])-1]))
					is = append(is, pg.Int64s(filled(r, n*l)))
				}
				return g.ReduceScatterCoalesced(ctx, os, is, pg.Op(pg.Sum)).Wait(ctx)
			}))
			for r := range n {
				for i, l := range lens {
					for e := range l {
						var want int64
						for q := range n {
							want += val(q, r*l+e)
						}
						if rs[r][i][e] != want {
							t.Fatalf("reducescatter_coalesced: rank %d tensor %d element %d = %d, want %d", r, i, e, rs[r][i][e], want)
						}
					}
				}
			}
		})
	}
}

// TestSendRecvTags: rank 0 sends rank 1 messages on two tags, the second
// tag first in time; rank 1 receives tag 1 first. Messages of one tag
// arrive in order, whatever the other tag does, and collectives run while
// a Recv is pending.
func TestSendRecvTags(t *testing.T) {
	gs := extGroups(t, 3)
	ctx := ctx30(t)
	// A Recv pending across collectives does not block them.
	late := make([]int64, 3)
	pending := gs[2].Recv(ctx, pg.Int64s(late), 0, 9)
	waitAll(t, "allreduce beside a pending recv", each(gs, func(r int, g *Group) error {
		return g.AllReduce(ctx, pg.Int64s(filled(r, 10)), pg.Op(pg.Sum)).Wait(ctx)
	}))
	select {
	case <-pending.Done():
		t.Fatalf("recv finished before its send: %v", pending.Err())
	default:
	}

	// A pending collective does not block Send and Recv: rank 0 waits in
	// a barrier that rank 1 enters only after their message.
	bar := gs[0].Barrier(ctx)
	x := make([]int64, 2)
	if err := pg.WaitAll(ctx, gs[0].Send(ctx, pg.Int64s([]int64{1, 2}), 1, 0),
		gs[1].Recv(ctx, pg.Int64s(x), 0, 0)); err != nil || x[1] != 2 {
		t.Fatalf("send/recv beside a pending barrier: %v, %v", err, x)
	}
	if err := pg.WaitAll(ctx, bar, gs[1].Barrier(ctx), gs[2].Barrier(ctx)); err != nil {
		t.Fatal(err)
	}

	msgs := func(tag, k int) []int64 { return []int64{int64(tag), int64(k), int64(k * k)} }
	var sends []pg.Work
	for k := range 3 {
		sends = append(sends, gs[0].Send(ctx, pg.Int64s(msgs(2, k)), 1, 2))
	}
	for k := range 3 {
		sends = append(sends, gs[0].Send(ctx, pg.Int64s(msgs(1, k)), 1, 1))
	}
	big := filled(0, 1000) // many frames
	sends = append(sends, gs[0].Send(ctx, pg.Int64s(big), 1, 1))
	// Let every message arrive before its Recv, so that the Recvs are
	// matched from the buffered messages (the Mixed test covers Recvs
	// that wait).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s := &gs[1].links[0].p2p
		s.mu.Lock()
		n := s.arrived
		s.mu.Unlock()
		if n == 8 || time.Now().After(deadline) { // the message beside the barrier, and 7 more
			break
		}
	}
	for _, tag := range []int{1, 2} {
		for k := range 3 {
			got := make([]int64, 3)
			w := gs[1].Recv(ctx, pg.Int64s(got), 0, tag)
			if err := w.Wait(ctx); err != nil {
				t.Fatalf("recv tag %d #%d: %v", tag, k, err)
			}
			if !slices.Equal(got, msgs(tag, k)) {
				t.Fatalf("recv tag %d #%d: got %v, want %v", tag, k, got, msgs(tag, k))
			}
		}
	}
	gotBig := make([]int64, 1000)
	w := gs[1].Recv(ctx, pg.Int64s(gotBig), 0, 1)
	if err := w.Wait(ctx); err != nil || !slices.Equal(gotBig, big) || w.Seq() != 8 {
		t.Fatalf("big recv: %v, seq %d (want 8), equal %v", err, w.Seq(), slices.Equal(gotBig, big))
	}
	for i, s := range sends {
		if err := s.Wait(ctx); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if s.Seq() != uint64(i+2) {
			t.Errorf("send %d has seq %d, want %d", i, s.Seq(), i+2)
		}
	}
	// Sends from rank 0 to 2 are numbered apart from those to rank 1.
	s := gs[0].Send(ctx, pg.Int64s([]int64{4, 5, 6}), 2, 9)
	if err := pending.Wait(ctx); err != nil || !slices.Equal(late, []int64{4, 5, 6}) {
		t.Fatalf("pending recv: %v, %v", err, late)
	}
	if err := s.Wait(ctx); err != nil || s.Seq() != 1 || pending.Seq() != 1 {
		t.Fatalf("send to rank 2: %v, seq %d; recv seq %d; want 1 and 1", err, s.Seq(), pending.Seq())
	}
	// An empty message.
	e1, e2 := gs[2].Send(ctx, pg.Int64s(nil), 1, 0), gs[1].Recv(ctx, pg.Int64s(nil), 2, 0)
	if err := pg.WaitAll(ctx, e1, e2); err != nil {
		t.Fatalf("empty message: %v", err)
	}
}

// TestSendRecvLengthMismatch: the Recv's tensor is shorter than the
// message. Both sides fail with ErrInvalidArgument, and the link still
// works for the next message and for collectives.
func TestSendRecvLengthMismatch(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	s := gs[0].Send(ctx, pg.Int64s(filled(0, 100)), 1, 3)
	short := make([]int64, 99)
	r := gs[1].Recv(ctx, pg.Int64s(short), 0, 3)
	if err := r.Wait(ctx); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("recv: got %v, want ErrInvalidArgument", err)
	}
	if err := s.Wait(ctx); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("send: got %v, want ErrInvalidArgument", err)
	}
	for _, v := range short {
		if v != 0 {
			t.Fatalf("the refused recv's tensor was written: %v", short)
		}
	}
	ok := make([]int64, 2)
	if err := pg.WaitAll(ctx, gs[0].Send(ctx, pg.Int64s([]int64{7, 8}), 1, 3),
		gs[1].Recv(ctx, pg.Int64s(ok), 0, 3)); err != nil || ok[1] != 8 {
		t.Fatalf("next message: %v, %v", err, ok)
	}
	waitAll(t, "allreduce after", each(gs, func(r int, g *Group) error {
		return g.AllReduce(ctx, pg.Int64s(filled(r, 10)), pg.Op(pg.Sum)).Wait(ctx)
	}))
}

// TestRecvPeerDies: rank 2 waits for a message from rank 1, which
// closes its group. The Recv fails at once naming rank 1, and a Send to
// rank 1 afterwards fails at once too.
func TestRecvPeerDies(t *testing.T) {
	gs := extGroups(t, 3)
	ctx := ctx30(t)
	w := gs[2].Recv(ctx, pg.NewTensor(pg.Float32, 4), 1, 0)
	s := gs[0].Send(ctx, pg.NewTensor(pg.Float32, 4), 1, 0) // never received
	start := time.Now()
	gs[1].Close()
	wantNames(t, "recv", w.Wait(ctx), 1, pg.ErrRemote)
	wantNames(t, "send", s.Wait(ctx), 1, pg.ErrRemote)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v to notice", took)
	}
	wantNames(t, "later send", gs[2].Send(ctx, pg.NewTensor(pg.Float32, 4), 1, 0).Wait(ctx), 1, pg.ErrRemote)
}

// TestSendRecvTimeout: a Recv nobody sends to fails with ErrTimeout
// naming the peer after the group timeout, as does a Send nobody
// receives; the group goes on.
func TestSendRecvTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	gs := newGroups(t, 2, timeout, nil)
	ctx := ctx30(t)
	r := gs[1].Recv(ctx, pg.NewTensor(pg.Float32, 4), 0, 5)
	s := gs[0].Send(ctx, pg.NewTensor(pg.Float32, 4), 1, 6)
	wantNames(t, "recv", r.Wait(ctx), 0, pg.ErrTimeout)
	wantNames(t, "send", s.Wait(ctx), 1, pg.ErrTimeout)
	waitAll(t, "allreduce after", each(gs, func(r int, g *Group) error {
		return g.AllReduce(ctx, pg.Int64s(filled(r, 10)), pg.Op(pg.Sum)).Wait(ctx)
	}))
}

// TestSubgroupsInFlight: a world of 4 splits into evens and odds and makes
// a new group of {3, 1}; collectives on all of them, and on the parent,
// are issued at once and interleaved, and all are right. A subgroup of a
// subgroup works too.
func TestSubgroupsInFlight(t *testing.T) {
	gs := extGroups(t, 4)
	ctx := ctx30(t)
	splits := make([]pg.ProcessGroup, 4)
	news := make([]pg.ProcessGroup, 4)
	waitAll(t, "split", each(gs, func(r int, g *Group) error {
		var err error
		if splits[r], err = g.Split(ctx, r%2, -r); err != nil { // key -r: reversed order
			return err
		}
		news[r], err = g.NewGroup(ctx, []int{3, 1})
		return err
	}))
	t.Cleanup(func() {
		for _, s := range append(splits, news...) {
			if s != nil {
				s.Close()
			}
		}
	})
	for r := range 4 {
		if splits[r].Size() != 2 || splits[r].Rank() != 1-r/2 {
			t.Fatalf("rank %d: split rank %d of %d, want %d of 2", r, splits[r].Rank(), splits[r].Size(), 1-r/2)
		}
		if (news[r] != nil) != (r%2 == 1) || (news[r] != nil && news[r].Rank() != (3-r)/2) {
			t.Fatalf("rank %d: new group %v", r, news[r])
		}
	}
	const rounds = 20
	waitAll(t, "interleaved", each(gs, func(r int, g *Group) error {
		var works []pg.Work
		var bufs [][]int64
		for range rounds {
			for _, h := range []pg.ProcessGroup{g, splits[r], news[r]} {
				if h == nil {
					continue
				}
				b := filled(r, 50)
				bufs = append(bufs, b)
				works = append(works, h.AllReduce(ctx, pg.Int64s(b), pg.Op(pg.Sum)))
			}
		}
		if err := pg.WaitAll(ctx, works...); err != nil {
			return err
		}
		k := 0
		for range rounds {
			for _, members := range [][]int{{0, 1, 2, 3}, {r % 2, r%2 + 2}, {1, 3}} {
				if len(members) == 2 && members[0] == 1 && members[1] == 3 && r%2 == 0 {
					continue // not in the new group
				}
				for e, v := range bufs[k] {
					var want int64
					for _, q := range members {
						want += val(q, e)
					}
					if v != want {
						return fmt.Errorf("allreduce %d: element %d = %d, want %d", k, e, v, want)
					}
				}
				k++
			}
		}
		return nil
	}))
	// A subgroup of the odd subgroup: both members.
	subsub := make([]pg.ProcessGroup, 4)
	waitAll(t, "split of split", each(gs, func(r int, g *Group) error {
		if r%2 == 0 {
			return nil
		}
		var err error
		subsub[r], err = splits[r].(pg.Splitter).Split(ctx, 0, r)
		if err != nil {
			return err
		}
		b := filled(r, 3)
		if err := subsub[r].AllReduce(ctx, pg.Int64s(b), pg.Op(pg.Sum)).Wait(ctx); err != nil {
			return err
		}
		if b[0] != val(1, 0)+val(3, 0) {
			return fmt.Errorf("subsub allreduce: %v", b)
		}
		return subsub[r].Close()
	}))
}

// TestSubgroupPeerDies: rank 2's connections in the subgroup {0, 1, 2}
// break (as if it crashed there). The subgroup's collectives fail on
// ranks 0 and 1 naming subgroup rank 2 and parent rank 2, while the
// parent, and a sibling subgroup without rank 2, still work.
func TestSubgroupPeerDies(t *testing.T) {
	gs := extGroups(t, 4)
	ctx := ctx30(t)
	a := make([]pg.ProcessGroup, 4) // {2, 0, 1}: rank 2 is subgroup rank 0
	b := make([]pg.ProcessGroup, 4) // {0, 3}
	waitAll(t, "new groups", each(gs, func(r int, g *Group) error {
		var err error
		if a[r], err = g.NewGroup(ctx, []int{2, 0, 1}); err != nil {
			return err
		}
		b[r], err = g.NewGroup(ctx, []int{0, 3})
		return err
	}))
	t.Cleanup(func() {
		for _, s := range append(a, b...) {
			if s != nil {
				s.Close()
			}
		}
	})
	for _, l := range a[2].(*Group).links {
		if l != nil {
			l.conn.Close() // a crash, not a goodbye
		}
	}
	for _, r := range []int{0, 1} {
		err := a[r].AllReduce(ctx, pg.Int64s(filled(r, 100)), pg.Op(pg.Sum)).Wait(ctx)
		wantNames(t, fmt.Sprintf("rank %d in the subgroup", r), err, 0, pg.ErrComm, pg.ErrRemote)
		if err != nil && !strings.Contains(err.Error(), "rank 2 of the parent") {
			t.Errorf("rank %d: the error does not name the parent rank: %v", r, err)
		}
	}
	waitAll(t, "parent after", each(gs, func(r int, g *Group) error {
		buf := filled(r, 10)
		if err := g.AllReduce(ctx, pg.Int64s(buf), pg.Op(pg.Sum)).Wait(ctx); err != nil {
			return err
		}
		if r == 0 || r == 3 {
			return b[r].Barrier(ctx).Wait(ctx)
		}
		return nil
	}))
}

// TestCompletionHook: the hook sees every Work, collectives in sequence
// order with their op names, and Send/Recv numbered apart.
func TestCompletionHook(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	var mu sync.Mutex
	var infos []pg.WorkInfo
	gs[0].OnCompletion(func(w pg.WorkInfo) {
		mu.Lock()
		infos = append(infos, w)
		mu.Unlock()
	})
	waitAll(t, "ops", each(gs, func(r int, g *Group) error {
		var works []pg.Work
		for range 5 {
			works = append(works, g.AllReduce(ctx, pg.Int64s(filled(r, 10)), pg.Op(pg.Sum)))
		}
		works = append(works, g.Barrier(ctx))
		works = append(works, g.AllToAll(ctx, pg.NewTensor(pg.Int64, 4), pg.NewTensor(pg.Int64, 4), nil, nil))
		if r == 0 {
			works = append(works, g.Send(ctx, pg.NewTensor(pg.Int64, 4), 1, 0))
		} else {
			works = append(works, g.Recv(ctx, pg.NewTensor(pg.Int64, 4), 0, 0))
		}
		return pg.WaitAll(ctx, works...)
	}))
	gs[0].Close() // delivers what is queued
	mu.Lock()
	defer mu.Unlock()
	var seqs []uint64
	var send *pg.WorkInfo
	var colls []pg.WorkInfo
	for i, w := range infos {
		if w.Op == pg.OpSend {
			send = &infos[i]
			continue
		}
		colls = append(colls, w)
		seqs = append(seqs, w.Seq)
		if w.Rank != 0 || w.Err != nil || w.Finished.Before(w.Started) || w.Started.Before(w.Issued) {
			t.Errorf("bad info %+v", w)
		}
	}
	if !slices.Equal(seqs, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("collective seqs %v, want 1..7", seqs)
	}
	if len(colls) != 7 || colls[0].Op != pg.OpAllReduce || colls[0].InBytes != 80 || colls[0].Dtype != pg.Int64 ||
		colls[6].Op != pg.OpAllToAll {
		t.Errorf("infos %+v", colls)
	}
	if send == nil || send.Seq != 1 || send.InBytes != 32 {
		t.Errorf("send info %+v", send)
	}
}

// TestExtendedMixedInFlight: every rank issues a long mix of collectives
// of every kind without waiting, with Sends and Recvs between them on
// other goroutines, then waits for all; every result is right.
func TestExtendedMixedInFlight(t *testing.T) {
	const n, rounds, length = 3, 10, 40
	gs := extGroups(t, n)
	ctx := ctx30(t)
	waitAll(t, "mixed", each(gs, func(r int, g *Group) error {
		// Point-to-point around the ring, beside the collectives.
		p2p := make(chan error, 1)
		go func() {
			var works []pg.Work
			got := make([][]int64, rounds)
			for k := range rounds {
				works = append(works, g.Send(ctx, pg.Int64s(filled(r*rounds+k, length)), (r+1)%n, k%2))
				got[k] = make([]int64, length)
			}
			for k := range rounds { // the same tag order as sent
				works = append(works, g.Recv(ctx, pg.Int64s(got[k]), (r+n-1)%n, k%2))
			}
			if err := pg.WaitAll(ctx, works...); err != nil {
				p2p <- err
				return
			}
			for k := range rounds {
				if want := filled(((r+n-1)%n)*rounds+k, length); !slices.Equal(got[k], want) {
					p2p <- fmt.Errorf("recv %d: got %v, want %v", k, got[k][:3], want[:3])
					return
				}
			}
			p2p <- nil
		}()
		type check func() error
		var works []pg.Work
		var checks []check
		for k := range rounds {
			root := k % n
			red := filled(r, length)
			works = append(works, g.Reduce(ctx, pg.Int64s(red), root, pg.Op(pg.Max)))
			checks = append(checks, func() error {
				want := filled(r, length)
				if r == root {
					want = filled(n-1, length)
				}
				if !slices.Equal(red, want) {
					return fmt.Errorf("reduce %d: %v", k, red[:3])
				}
				return nil
			})
			var gout []int64
			if r == root {
				gout = make([]int64, n*length)
			}
			works = append(works, g.Gather(ctx, pg.Int64s(gout), pg.Int64s(filled(r, length)), root))
			checks = append(checks, func() error {
				for q := range n {
					if r == root && !slices.Equal(gout[q*length:(q+1)*length], filled(q, length)) {
						return fmt.Errorf("gather %d: segment %d", k, q)
					}
				}
				return nil
			})
			a2a := make([]int64, n*length)
			in := make([]int64, n*length)
			for j := range n {
				copy(in[j*length:], filled(r*n+j, length))
			}
			works = append(works, g.AllToAll(ctx, pg.Int64s(a2a), pg.Int64s(in), nil, nil))
			checks = append(checks, func() error {
				for i := range n {
					if !slices.Equal(a2a[i*length:(i+1)*length], filled(i*n+r, length)) {
						return fmt.Errorf("alltoall %d: chunk %d", k, i)
					}
				}
				return nil
			})
			co := []pg.Tensor{pg.Int64s(filled(r, length)), pg.Int64s(filled(r, 3))}
			works = append(works, g.AllReduceCoalesced(ctx, co, pg.Op(pg.Sum)))
			checks = append(checks, func() error {
				for e, v := range pg.View[int64](co[1]) {
					if want := val(0, e) + val(1, e) + val(2, e); v != want {
						return fmt.Errorf("allreduce_coalesced %d: %d, want %d", k, v, want)
					}
				}
				return nil
			})
			works = append(works, g.AllReduce(ctx, pg.NewTensor(pg.Float32, 1000), pg.Op(pg.Sum)))
		}
		if err := pg.WaitAll(ctx, works...); err != nil {
			return err
		}
		for i, w := range works {
			if w.Seq() != uint64(i+1) {
				return fmt.Errorf("work %d has seq %d", i, w.Seq())
			}
		}
		for _, c := range checks {
			if err := c(); err != nil {
				return err
			}
		}
		return <-p2p
	}))
}

// TestSendRecvBothWays: two ranks send each other large messages at once
// before either receives; nothing deadlocks.
func TestSendRecvBothWays(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	waitAll(t, "both ways", each(gs, func(r int, g *Group) error {
		s := g.Send(ctx, pg.Int64s(filled(r, 100000)), 1-r, 0)
		got := make([]int64, 100000)
		if err := g.Recv(ctx, pg.Int64s(got), 1-r, 0).Wait(ctx); err != nil {
			return err
		}
		if !slices.Equal(got, filled(1-r, 100000)) {
			return fmt.Errorf("rank %d got the wrong data", r)
		}
		return s.Wait(ctx)
	}))
}

// TestExtendedInvalid: bad arguments fail at once with ErrInvalidArgument
// and Seq 0, without issuing anything: the group still works.
func TestExtendedInvalid(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	g := gs[0]
	for name, w := range map[string]pg.Work{
		"reduce root":       g.Reduce(ctx, pg.NewTensor(pg.Int64, 2), 2, pg.Op(pg.Sum)),
		"gather size":       g.Gather(ctx, pg.NewTensor(pg.Int64, 3), pg.NewTensor(pg.Int64, 2), 0),
		"scatter size":      g.Scatter(ctx, pg.NewTensor(pg.Int64, 2), pg.NewTensor(pg.Int64, 3), 0),
		"alltoall split":    g.AllToAll(ctx, pg.NewTensor(pg.Int64, 2), pg.NewTensor(pg.Int64, 2), []int{1, 1}, []int{2, 0}),
		"alltoall not even": g.AllToAll(ctx, pg.NewTensor(pg.Int64, 3), pg.NewTensor(pg.Int64, 3), nil, nil),
		"send self":         g.Send(ctx, pg.NewTensor(pg.Int64, 2), 0, 0),
		"recv tag":          g.Recv(ctx, pg.NewTensor(pg.Int64, 2), 1, -1),
		"coalesced pairs":   g.AllGatherCoalesced(ctx, nil, []pg.Tensor{pg.NewTensor(pg.Int64, 2)}),
	} {
		if err := w.Wait(ctx); !errors.Is(err, pg.ErrInvalidArgument) || w.Seq() != 0 {
			t.Errorf("%s: got %v (seq %d), want ErrInvalidArgument and seq 0", name, err, w.Seq())
		}
	}
	if _, err := g.Split(ctx, -2, 0); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("split color -2: got %v", err)
	}
	if _, err := g.NewGroup(ctx, []int{0, 0}); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Errorf("new group with a duplicate: got %v", err)
	}
	waitAll(t, "barrier after", each(gs, func(r int, g *Group) error { return g.Barrier(ctx).Wait(ctx) }))
}

// TestSubgroupAdvertise: a subgroup of a group that listens on every
// interface and advertises a host listens on a fresh port and advertises
// the same host with that port.
func TestSubgroupAdvertise(t *testing.T) {
	o := Options{advertiseHost: "10.0.0.5"}
	got, err := o.advertise(&net.TCPAddr{IP: net.IPv4zero, Port: 1234})
	if err != nil || got != "10.0.0.5:1234" {
		t.Errorf("advertise: %q, %v; want 10.0.0.5:1234", got, err)
	}
	if _, err := (Options{}).advertise(&net.TCPAddr{IP: net.IPv4zero, Port: 1234}); !errors.Is(err,
		pg.ErrInvalidArgument) {
		t.Errorf("advertise without a host: %v; want ErrInvalidArgument", err)
	}
}

// TestSendToStalledPeer: the peer passed the handshake but reads nothing,
// so a large Send cannot even be written. It fails with ErrTimeout naming
// the peer after the group timeout, and the link is given up, instead of
// the Work waiting on the writer forever.
func TestSendToStalledPeer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	g, _ := fakePeer(t, func(o *Options) { o.Timeout = timeout })
	ctx := ctx30(t)
	start := time.Now()
	err := g.Send(ctx, pg.NewTensor(pg.Uint8, 64<<20), 1, 0).Wait(ctx)
	wantNames(t, "send", err, 1, pg.ErrTimeout)
	if took := time.Since(start); took > timeout+5*time.Second {
		t.Errorf("the send took %v to fail", took)
	}
	wantNames(t, "a later send", g.Send(ctx, pg.NewTensor(pg.Uint8, 4), 1, 0).Wait(ctx), 1, pg.ErrTimeout)
}

// TestRecvContext: a Recv whose ctx ends fails with ErrTimeout at once;
// the group, and the link, go on.
func TestRecvContext(t *testing.T) {
	gs := extGroups(t, 2)
	ctx := ctx30(t)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := gs[1].Recv(short, pg.NewTensor(pg.Int64, 2), 0, 0).Wait(ctx); !errors.Is(err, pg.ErrTimeout) {
		t.Errorf("recv: got %v, want ErrTimeout", err)
	}
	x := make([]int64, 2)
	if err := pg.WaitAll(ctx, gs[0].Send(ctx, pg.Int64s([]int64{3, 4}), 1, 0),
		gs[1].Recv(ctx, pg.Int64s(x), 0, 0)); err != nil || x[1] != 4 {
		t.Fatalf("next message: %v, %v", err, x)
	}
}

// TestGatherLengthMismatch: rank 2 gathers 3 elements where the others
// gather 2. The root fails naming rank 2 with ErrMismatch, and nothing is
// written outside its output.
func TestGatherLengthMismatch(t *testing.T) {
	gs := extGroups(t, 3)
	ctx := ctx30(t)
	backing := make([]int64, 10)
	errs := each(gs, func(r int, g *Group) error {
		in := filled(r, 2)
		if r == 2 {
			in = filled(r, 3)
		}
		var out []int64
		if r == 0 {
			out = backing[:6:6]
		}
		return g.Gather(ctx, pg.Int64s(out), pg.Int64s(in), 0).Wait(ctx)
	})
	wantNames(t, "root", errs[0], 2, pg.ErrMismatch)
	if !slices.Equal(backing[6:], make([]int64, 4)) {
		t.Errorf("written past the output: %v", backing)
	}
}
