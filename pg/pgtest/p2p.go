package pgtest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
)

// p2pTags are the tags of the ring test, one per dtype, with the length
// of each of their messages.
func p2pTags() []struct{ tag, length int } {
	return []struct{ tag, length int }{{0, 1}, {1, 0}, {2, 7}, {3, 1000}, {9, 3}, {100, 64}, {1 << 20, 1}}
}

// p2pOp is one Send or Recv of a rank in a point-to-point test.
type p2pOp struct {
	send bool
	peer int
	tag  int
	buf  pg.Tensor // what is sent, or where it is received
	want pg.Tensor // what buf must hold afterwards
	what string
}

func (o p2pOp) issue(ctx context.Context, x pg.PointToPoint) pg.Work {
	if o.send {
		return x.Send(ctx, o.buf, o.peer, o.tag)
	}
	return x.Recv(ctx, o.buf, o.peer, o.tag)
}

// op is the op o's Work reports.
func (o p2pOp) op() pg.OpType {
	if o.send {
		return pg.OpSend
	}
	return pg.OpRecv
}

// ringMessage is message m of tag ti from src to dst, forward (dir 0, to
// src+1) or backward (dir 1, to src-1).
func ringMessage(ti, m, src, dst, dir int) pg.Tensor {
	d := pg.Dtypes()[ti%len(pg.Dtypes())]
	return randomBytes(d, p2pTags()[ti].length, uint64(ti*100+m), uint64(src*1000+dst*10+dir))
}

// ringPlan is what rank r of n issues in the ring test: perTag messages of
// every tag to each neighbour, and the matching receives from each. Even
// ranks send first, odd ranks receive first; receives go through the tags
// in the reverse order of sends, so only the tag matches them, unless
// ordered (Options.OrderedPointToPoint).
func ringPlan(n, r, perTag int, ordered bool) []p2pOp {
	next, prev := (r+1)%n, (r+n-1)%n
	tags := p2pTags()
	var sends, recvs []p2pOp
	for m := range perTag {
		for ti, tg := range tags {
			fwd, bwd := ringMessage(ti, m, r, next, 0), ringMessage(ti, m, r, prev, 1)
			sends = append(sends,
				p2pOp{send: true, peer: next, tag: tg.tag, buf: fwd, want: clone(fwd),
					what: fmt.Sprintf("send #%d of tag %d to rank %d", m, tg.tag, next)},
				p2pOp{send: true, peer: prev, tag: tg.tag, buf: bwd, want: clone(bwd),
					what: fmt.Sprintf("send #%d of tag %d to rank %d", m, tg.tag, prev)})
		}
		for k := range tags {
			ti := len(tags) - 1 - k
			if ordered {
				ti = k
			}
			tg := tags[ti]
			fromPrev, fromNext := ringMessage(ti, m, prev, r, 0), ringMessage(ti, m, next, r, 1)
			recvs = append(recvs,
				p2pOp{peer: prev, tag: tg.tag, buf: randomBytes(fromPrev.Dtype, fromPrev.Len(), 1, uint64(r)), want: fromPrev,
					what: fmt.Sprintf("recv #%d of tag %d from rank %d", m, tg.tag, prev)},
				p2pOp{peer: next, tag: tg.tag, buf: randomBytes(fromNext.Dtype, fromNext.Len(), 2, uint64(r)), want: fromNext,
					what: fmt.Sprintf("recv #%d of tag %d from rank %d", m, tg.tag, next)})
		}
	}
	if r%2 == 1 {
		return append(recvs, sends...)
	}
	return append(sends, recvs...)
}

// sendRecvRing: every rank sends to both neighbours at once on several
// tags, several messages per tag. Each message must arrive intact at the
// receive of its tag in the order sent, senders' tensors must stay as
// they were, and the Works' Seq must count each peer's sends and receives
// apart, without gaps.
func sendRecvRing(t *testing.T, w *world, perTag int, ordered bool) {
	if w.n == 1 {
		t.Skip("a world of one rank has no peer")
	}
	plans := make([][]p2pOp, w.n)
	for r := range plans {
		plans[r] = ringPlan(w.n, r, perTag, ordered)
	}
	runP2P(t, w, plans, fmt.Sprintf("world=%d send/recv ring", w.n))
}

// sendRecvAmidCollectives: the ring's sends and receives with
// collectives issued among them at a different point on every rank, as
// the contract allows (at the same point if ordered).
func sendRecvAmidCollectives(t *testing.T, w *world, ordered bool) {
	if w.n == 1 {
		t.Skip("a world of one rank has no peer")
	}
	trials := []trial{
		allReduceTrial(w, pg.Float32, pg.Op(pg.Sum), 1000, 1),
		allToAllTrial(w, pg.Int64, randomSplits(w.n, 100, 1), 0, 1),
		gatherTrial(w, pg.BFloat16, w.n-1, 77, false),
	}
	plans := make([][]p2pOp, w.n)
	for r := range plans {
		plans[r] = ringPlan(w.n, r, 1, ordered)
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	colls := make([][]pg.Work, w.n)
	at := func(r int) int {
		if ordered {
			return len(plans[r]) / 2
		}
		return (r * 5) % (len(plans[r]) + 1)
	}
	p2p := issueP2P(ctx, w, plans, func(ctx context.Context, r int, g pg.ProcessGroup, i int) {
		if i == at(r) {
			for _, tr := range trials {
				colls[r] = append(colls[r], tr.issue(ctx, r, g))
			}
		}
	})
	for i, tr := range trials {
		ok := true
		for r, err := range w.wait(t, tr.what, column(colls, i)) {
			if err != nil {
				t.Errorf("%s, amid sends and receives: rank %d: %v", tr.what, r, err)
				ok = false
			}
		}
		if ok {
			tr.verify(t)
		}
	}
	judgeP2P(t, w, plans, p2p, fmt.Sprintf("world=%d send/recv ring amid collectives", w.n))
}

// issueP2P issues every rank's plan on its own goroutine and returns the
// Works by rank. before, if not nil, runs before op i of rank r's plan,
// and once more after the last.
func issueP2P(ctx context.Context, w *world, plans [][]p2pOp,
	before func(ctx context.Context, r int, g pg.ProcessGroup, i int)) [][]pg.Work {
	return issue(w, nil, func(r int, g pg.ProcessGroup) []pg.Work {
		ws := make([]pg.Work, len(plans[r]))
		x, ok := g.(pg.PointToPoint)
		for i, o := range plans[r] {
			if before != nil {
				before(ctx, r, g, i)
			}
			if !ok {
				ws[i] = pg.Completed(notExtended(g))
				continue
			}
			ws[i] = o.issue(ctx, x)
		}
		if before != nil {
			before(ctx, r, g, len(plans[r]))
		}
		return ws
	})
}

// runP2P issues every rank's plan, waits for all of it and judges it.
func runP2P(t *testing.T, w *world, plans [][]p2pOp, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	judgeP2P(t, w, plans, issueP2P(ctx, w, plans, nil), what)
}

// judgeP2P waits for the Works of every rank's plan and judges them.
func judgeP2P(t *testing.T, w *world, plans [][]p2pOp, works [][]pg.Work, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	const shown = 6 // failures reported in full per rank
	for r, ws := range works {
		if !w.holds(r) {
			continue
		}
		bad := 0
		for i, wk := range ws {
			o := plans[r][i]
			select {
			case <-wk.Done():
			case <-ctx.Done():
				t.Fatalf("%s: rank %d: %s did not finish within %v: hung", what, r, o.what, w.limit)
			}
			var msg string
			if err := wk.Err(); err != nil {
				msg = fmt.Sprintf("%s: %v", o.what, err)
			} else if err := Compare(o.buf, o.want, 0); err != nil && o.send {
				msg = fmt.Sprintf("%s changed the tensor sent: %v", o.what, err)
			} else if err != nil {
				msg = fmt.Sprintf("%s: %v", o.what, err)
			}
			if msg != "" {
				if bad++; bad <= shown {
					t.Errorf("%s: rank %d: %s", what, r, msg)
				}
			}
		}
		if bad > shown {
			t.Errorf("%s: rank %d: %d more of its %d sends and receives failed", what, r, bad-shown, len(ws))
		}
		checkP2PSeqs(t, what, r, plans[r], ws)
	}
}

// checkP2PSeqs wants the Seqs of rank r's sends to each peer, and of its
// receives from each peer, to count up by one in the order issued.
func checkP2PSeqs(t testing.TB, what string, r int, plan []p2pOp, works []pg.Work) {
	t.Helper()
	type key struct {
		send bool
		peer int
	}
	seqs := map[key][]uint64{}
	var keys []key
	for i, o := range plan {
		k := key{o.send, o.peer}
		if _, ok := seqs[k]; !ok {
			keys = append(keys, k)
		}
		seqs[k] = append(seqs[k], works[i].Seq())
	}
	for _, k := range keys {
		s := seqs[k]
		dir := "receives from"
		if k.send {
			dir = "sends to"
		}
		for i := range s {
			if s[0] == 0 || s[i] != s[0]+uint64(i) {
				t.Errorf("%s: rank %d: the Seqs of its %s rank %d, in the order issued, are %v; want consecutive numbers from at "+
					"least 1",
					what, r, dir, k.peer, compact(s))
				break
			}
		}
	}
}

// compact shortens a long list of numbers for a failure message.
func compact(s []uint64) []uint64 {
	if len(s) > 12 {
		return slices.Concat(s[:6], s[len(s)-6:])
	}
	return s
}

// sendRecvOvertaking: rank 0 sends a message on tag 1 and then one on tag
// 2, each of 1 MiB (more than a socket buffer); the last rank receives
// tag 2 first and waits for it before it posts the receive of tag 1. A
// message must not hold up a later one of another tag.
func sendRecvOvertaking(t *testing.T, w *world) {
	if w.n == 1 {
		t.Skip("a world of one rank has no peer")
	}
	const length = 1 << 20
	last := w.n - 1
	what := fmt.Sprintf("world=%d, rank 0 sends tags 1 then 2, rank %d receives 2 then 1", w.n, last)
	a, b := randomBytes(pg.Uint8, length, 1, 1), randomBytes(pg.Uint8, length, 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	var sends []pg.Work
	if w.holds(0) {
		s0 := w.groups[0].(pg.PointToPoint)
		sends = []pg.Work{s0.Send(ctx, a, last, 1), s0.Send(ctx, b, last, 2)}
	}
	if !w.holds(last) { // RunRank: rank 0 only sends
		for i, wk := range sends {
			if err := w.waitOne(t, what, 0, wk); err != nil {
				t.Errorf("%s: rank 0: the send of tag %d: %v", what, i+1, err)
			}
		}
		return
	}
	rl := w.groups[last].(pg.PointToPoint)
	gotB := pg.NewTensor(pg.Uint8, length)
	if err := w.waitOne(t, what+": the receive of tag 2", last, rl.Recv(ctx, gotB, 0, 2)); err != nil {
		t.Fatalf("%s: rank %d: the receive of tag 2: %v", what, last, err)
	}
	gotA := pg.NewTensor(pg.Uint8, length)
	if err := w.waitOne(t, what+": the receive of tag 1", last, rl.Recv(ctx, gotA, 0, 1)); err != nil {
		t.Fatalf("%s: rank %d: the receive of tag 1: %v", what, last, err)
	}
	for i, wk := range sends {
		if err := w.waitOne(t, what, 0, wk); err != nil {
			t.Errorf("%s: rank 0: the send of tag %d: %v", what, i+1, err)
		}
	}
	if err := Compare(gotB, b, 0); err != nil {
		t.Errorf("%s: tag 2: %v", what, err)
	}
	if err := Compare(gotA, a, 0); err != nil {
		t.Errorf("%s: tag 1: %v", what, err)
	}
}
