package pgtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
)

// seqStep is one collective of the sequence-number test and what its
// completion hook must report on rank r.
type seqStep struct {
	tr    trial
	op    pg.OpType
	dtype pg.Dtype
	bytes func(r int) (in, out int64)
}

func both(n int64) func(int) (int64, int64) {
	return func(int) (int64, int64) { return n, n }
}

// seqSteps is one collective of every kind, each with its hook report.
func seqSteps(w *world) []seqStep {
	n := int64(w.n)
	first, last := 0, w.n-1
	splits := randomSplits(w.n, 9, 5)
	onRoot := func(root int, rootIn, rootOut, in, out int64) func(int) (int64, int64) {
		return func(r int) (int64, int64) {
			if r == root {
				return rootIn, rootOut
			}
			return in, out
		}
	}
	return []seqStep{
		{allReduceTrial(w, pg.Float32, pg.Op(pg.Sum), 10, 1), pg.OpAllReduce, pg.Float32, both(40)},
		{broadcastTrial(w, pg.Float64, last, 5), pg.OpBroadcast, pg.Float64, both(40)},
		{allGatherTrial(w, pg.Int32, 3), pg.OpAllGather, pg.Int32, func(int) (int64, int64) { return 12, 12 * n }},
		{reduceScatterTrial(w, pg.BFloat16, pg.Op(pg.Sum), 4, 2), pg.OpReduceScatter, pg.BFloat16,
			func(int) (int64, int64) { return 8 * n, 8 }},
		{barrierTrial(w), pg.OpBarrier, 0, both(0)},
		{reduceTrial(w, pg.Int64, pg.Op(pg.Max), first, 6, 3), pg.OpReduce, pg.Int64, both(48)},
		{gatherTrial(w, pg.Uint8, last, 5, true), pg.OpGather, pg.Uint8, onRoot(last, 5, 5*n, 5, 0)},
		{scatterTrial(w, pg.Float16, first, 2, true), pg.OpScatter, pg.Float16, onRoot(first, 4*n, 4, 0, 4)},
		{allToAllTrial(w, pg.Float32, splits, 0, 5), pg.OpAllToAll, pg.Float32, func(r int) (int64, int64) {
			return 4 * int64(sum(splits[r])), 4 * int64(sum(columnOf(splits, r)))
		}},
		{allReduceCoalescedTrial(w, []pg.Dtype{pg.Float32}, pg.Op(pg.Sum), []int{3, 0, 5}, 4, false), pg.OpAllReduceCoalesced,
			pg.Float32, both(32)},
		{allGatherCoalescedTrial(w, pg.Int32, []int{1, 2}, false), pg.OpAllGatherCoalesced, pg.Int32,
			func(int) (int64, int64) { return 12, 12 * n }},
		{reduceScatterCoalescedTrial(w, pg.Float64, pg.Op(pg.Min), []int{2, 1}, 6, false), pg.OpReduceScatterCoalesced,
			pg.Float64, func(int) (int64, int64) { return 24 * n, 24 }},
		{allReduceCoalescedTrial(w, []pg.Dtype{pg.Int32}, pg.Op(pg.Bor), []int{4}, 7, true), pg.OpAllReduceCoalesced,
			pg.Int32, both(16)},
		// Refused on every rank: no sequence number, and the next
		// collective takes the number this one would have.
		{trial{
			what: fmt.Sprintf("world=%d reduce root=%d (refused)", w.n, w.n),
			issue: onExt(func(ctx context.Context, r int, x pg.Extended) pg.Work {
				return x.Reduce(ctx, pg.NewTensor(pg.Float32, 2), w.n, pg.Op(pg.Sum))
			}),
		}, pg.OpReduce, 0, nil},
		{allReduceTrial(w, pg.Uint8, pg.Op(pg.Product), 9, 8), pg.OpAllReduce, pg.Uint8, both(9)},
	}
}

// seqAndHooks checks Work.Seq and OnCompletion on a fresh world: a
// collective of every kind, all in flight at once, must be numbered 1, 2,
// 3... in the order issued on every rank (a refused one gets 0 and no
// number); two sends to the next rank and two receives from the previous
// must be numbered 1 and 2 apart from the collectives; and each rank's
// completion hook must see every one of them once, with its op, sequence
// number, rank, dtype and sizes.
func seqAndHooks(t *testing.T, w *world) {
	recs := installRecorders(w)
	steps := seqSteps(w)
	p2p := seqP2PPlan(w)
	what := fmt.Sprintf("world=%d sequence numbers", w.n)
	ctx, cancel := context.WithTimeout(context.Background(), w.limit)
	defer cancel()
	works := issueSeq(ctx, w, steps, p2p, recs)
	seq := checkSeqCollectives(t, w, what, steps, works)
	checkSeqP2P(t, w, what, p2p, works)
	checkSeqHooks(t, w, steps, p2p, recs, seq)
	slowHook(t, w)
}

// installRecorders gives each rank's group a completion hook that records.
func installRecorders(w *world) []*recorder {
	recs := make([]*recorder, w.n)
	for r, g := range w.groups {
		if g == nil {
			continue
		}
		recs[r] = newRecorder()
		g.(pg.CompletionHooker).OnCompletion(recs[r].hook)
	}
	return recs
}

// seqP2PPlan is, for each rank, two sends to the next rank and two
// receives from the previous, interleaved; nil in a world of one.
func seqP2PPlan(w *world) [][]p2pOp {
	if w.n <= 1 {
		return nil
	}
	var p2p [][]p2pOp
	for r := range w.n {
		next, prev := (r+1)%w.n, (r+w.n-1)%w.n
		var plan []p2pOp
		for m := range 2 {
			out := randomBytes(pg.Float32, 3, uint64(m), uint64(r))
			in := randomBytes(pg.Float32, 3, uint64(m), uint64(prev))
			send := p2pOp{send: true, peer: next, tag: 4, buf: out, want: clone(out),
				what: fmt.Sprintf("send #%d to rank %d", m, next)}
			recv := p2pOp{peer: prev, tag: 4, buf: pg.NewTensor(pg.Float32, 3), want: in,
				what: fmt.Sprintf("recv #%d from rank %d", m, prev)}
			if r%2 == 1 { // as ringTrial, odd ranks receive first
				send, recv = recv, send
			}
			plan = append(plan, send, recv)
		}
		p2p = append(p2p, plan)
	}
	return p2p
}

// seqIssued is what one rank issued in seqAndHooks.
type seqIssued struct{ coll, p2p []pg.Work }

// issueSeq issues every step, then the rank's sends and receives, on every
// rank at once, and tells each rank's recorder what it issued.
func issueSeq(ctx context.Context, w *world, steps []seqStep, p2p [][]p2pOp, recs []*recorder) []seqIssued {
	return issue(w, nil, func(r int, g pg.ProcessGroup) seqIssued {
		var is seqIssued
		for _, s := range steps {
			wk := s.tr.issue(ctx, r, g)
			if s.tr.verify != nil {
				recs[r].issued(s.op, wk)
			}
			is.coll = append(is.coll, wk)
		}
		if p2p != nil {
			for _, o := range p2p[r] {
				wk := o.issue(ctx, g.(pg.PointToPoint))
				recs[r].issued(o.op(), wk) // one peer each way: (op, seq) is unique
				is.p2p = append(is.p2p, wk)
			}
		}
		return is
	})
}

// checkSeqCollectives checks the collectives' results, errors and numbers,
// and returns the last number given.
func checkSeqCollectives(t *testing.T, w *world, what string, steps []seqStep, works []seqIssued) uint64 {
	seq := uint64(0)
	for i, s := range steps {
		col := make([]pg.Work, w.n)
		for r := range col {
			if w.holds(r) {
				col[r] = works[r].coll[i]
			}
		}
		errs := w.wait(t, s.tr.what, col)
		refused := s.tr.verify == nil
		want := uint64(0)
		if !refused {
			seq++
			want = seq
		}
		ok := true
		for r, err := range errs {
			if !w.holds(r) {
				continue
			}
			switch {
			case refused && !errors.Is(err, pg.ErrInvalidArgument):
				t.Errorf("%s: rank %d: got %v, want pg.ErrInvalidArgument", s.tr.what, r, err)
			case !refused && err != nil:
				t.Errorf("%s: rank %d: %v", s.tr.what, r, err)
				ok = false
			}
			if got := col[r].Seq(); got != want {
				t.Errorf("%s: rank %d: collective #%d issued has Seq %d, want %d", what, r, i+1, got, want)
			}
		}
		if ok && !refused {
			s.tr.verify(t)
		}
	}
	return seq
}

// checkSeqP2P checks the sends and receives: each peer and direction
// numbered from 1.
func checkSeqP2P(t *testing.T, w *world, what string, p2p [][]p2pOp, works []seqIssued) {
	for r := range p2p {
		if !w.holds(r) {
			continue
		}
		for i, o := range p2p[r] {
			wk := works[r].p2p[i]
			if err := w.waitOne(t, what, r, wk); err != nil {
				t.Errorf("%s: rank %d: %s: %v", what, r, o.what, err)
			} else if err := Compare(o.buf, o.want, 0); err != nil {
				t.Errorf("%s: rank %d: %s: %v", what, r, o.what, err)
			}
			if got, want := wk.Seq(), uint64(i/2+1); got != want {
				t.Errorf("%s: rank %d: %s has Seq %d, want %d: sends and receives are numbered per peer and direction from 1, "+
					"apart from collectives",
					what, r, o.what, got, want)
			}
		}
	}
}

// checkSeqHooks waits for each rank's hook to see the seq numbered
// collectives and the rank's sends and receives, and checks what it saw.
func checkSeqHooks(t *testing.T, w *world, steps []seqStep, p2p [][]p2pOp, recs []*recorder, seq uint64) {
	hookCtx, hookCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hookCancel()
	for r := range w.n {
		if !w.holds(r) {
			continue
		}
		want := int(seq)
		if p2p != nil {
			want += len(p2p[r])
		}
		checkHooks(t, fmt.Sprintf("world=%d completion hook", w.n), r, steps, p2p, recs[r].await(hookCtx, want))
		recs[r].mu.Lock()
		for _, info := range recs[r].early {
			t.Errorf("world=%d completion hook: rank %d: %v #%d was reported before its Work was done", w.n, r, info.Op,
				info.Seq)
		}
		recs[r].mu.Unlock()
	}
}

// slowHook: a completion hook that blocks must not hold up collectives;
// once it is released it sees them all.
func slowHook(t *testing.T, w *world) {
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer free()
	slow := make([]*recorder, w.n)
	for r, g := range w.groups {
		if g == nil {
			continue
		}
		rec := newRecorder()
		slow[r] = rec
		g.(pg.CompletionHooker).OnCompletion(func(info pg.WorkInfo) {
			<-release
			rec.hook(info)
		})
	}
	trials := make([]trial, 8)
	for i := range trials {
		trials[i] = allReduceTrial(w, pg.Int32, pg.Op(pg.Max), 100+i, uint64(i))
		trials[i].what += " (completion hooks blocked)"
	}
	w.tryAll(t, trials)
	free()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for r := range w.n {
		if !w.holds(r) {
			continue
		}
		if infos := slow[r].await(ctx, len(trials)); len(infos) < len(trials) {
			t.Errorf("world=%d: rank %d: a hook released after %d allreduces saw only %s", w.n, r, len(trials),
				describeInfos(infos))
		}
	}
}

// checkHooks wants infos, what rank r's hook saw, to report each step and
// send and receive exactly once, correctly.
func checkHooks(t *testing.T, what string, r int, steps []seqStep, p2p [][]p2pOp, infos []pg.WorkInfo) {
	t.Helper()
	checkHookInfos(t, what, r, infos)
	byKey := map[hookKey]pg.WorkInfo{}
	for _, info := range infos {
		byKey[hookKey{info.Op, info.Seq}] = info
	}
	checkHookSteps(t, what, r, steps, infos, byKey)
	if p2p != nil {
		checkHookP2P(t, what, r, p2p[r], infos, byKey)
	}
}

// checkHookInfos wants each report once, from rank r, without an error
// and with its times in order.
func checkHookInfos(t *testing.T, what string, r int, infos []pg.WorkInfo) {
	t.Helper()
	seen := map[hookKey]int{}
	for _, info := range infos {
		if info.Seq == 0 && errors.Is(info.Err, pg.ErrInvalidArgument) {
			continue // the refused collective, if reported at all
		}
		k := hookKey{info.Op, info.Seq}
		if seen[k]++; seen[k] == 2 {
			t.Errorf("%s: rank %d: %v #%d reported twice", what, r, info.Op, info.Seq)
		}
		if info.Rank != r {
			t.Errorf("%s: rank %d: %v #%d reported with Rank %d", what, r, info.Op, info.Seq, info.Rank)
		}
		if info.Err != nil {
			t.Errorf("%s: rank %d: %v #%d reported with error %v, but its Work succeeded", what, r, info.Op, info.Seq, info.Err)
		}
		if info.Issued.IsZero() || info.Started.Before(info.Issued) || info.Finished.Before(info.Started) {
			t.Errorf("%s: rank %d: %v #%d: times issued %v, started %v, finished %v are not in order",
				what, r, info.Op, info.Seq, info.Issued, info.Started, info.Finished)
		}
	}
}

// checkHookSteps wants every numbered step reported with its dtype and
// sizes on rank r.
func checkHookSteps(t *testing.T, what string, r int, steps []seqStep, infos []pg.WorkInfo,
	byKey map[hookKey]pg.WorkInfo) {
	t.Helper()
	seq := uint64(0)
	for _, s := range steps {
		if s.tr.verify == nil {
			continue
		}
		seq++
		info, ok := byKey[hookKey{s.op, seq}]
		if !ok {
			t.Errorf("%s: rank %d: never saw %v #%d (%s); saw %s", what, r, s.op, seq, s.tr.what, describeInfos(infos))
			continue
		}
		in, out := s.bytes(r)
		if info.Dtype != s.dtype || info.InBytes != in || info.OutBytes != out {
			t.Errorf("%s: rank %d: %v #%d reported dtype %v, %d bytes in, %d out; want %v, %d in, %d out",
				what, r, s.op, seq, info.Dtype, info.InBytes, info.OutBytes, s.dtype, in, out)
		}
	}
}

// checkHookP2P wants each of rank r's sends and receives, plan, reported
// with its dtype and size.
func checkHookP2P(t *testing.T, what string, r int, plan []p2pOp, infos []pg.WorkInfo, byKey map[hookKey]pg.WorkInfo) {
	t.Helper()
	for i, o := range plan {
		k := hookKey{o.op(), uint64(i/2 + 1)}
		info, ok := byKey[k]
		if !ok {
			t.Errorf("%s: rank %d: never saw %v #%d (%s); saw %s", what, r, k.op, k.seq, o.what, describeInfos(infos))
			continue
		}
		size := int64(len(o.buf.Data))
		// The buffer's own side must have its size; the other side may
		// count it too or be 0.
		mine, other := info.OutBytes, info.InBytes
		if o.send {
			mine, other = info.InBytes, info.OutBytes
		}
		if info.Dtype != o.buf.Dtype || mine != size || other != 0 && other != size {
			t.Errorf("%s: rank %d: %v #%d reported dtype %v, %d bytes in, %d out; want %v and %d bytes %s",
				what, r, k.op, k.seq, info.Dtype, info.InBytes, info.OutBytes, o.buf.Dtype, size,
				map[bool]string{true: "in", false: "out"}[o.send])
		}
	}
}

func describeInfos(infos []pg.WorkInfo) string {
	s := ""
	for i, info := range infos {
		if i == 20 {
			return s + " ..."
		}
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%v #%d", info.Op, info.Seq)
	}
	if s == "" {
		return "nothing"
	}
	return s
}
