package desync

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// queue is a FIFO drained by one goroutine: push never blocks, pop waits
// for an element or for close (then returns false once empty).
type queue[T any] struct {
	mu     sync.Mutex
	items  []T
	kick   chan struct{}
	closed bool
}

func (q *queue[T]) init() { q.kick = make(chan struct{}, 1) }

// push appends v and reports false if the queue is closed.
func (q *queue[T]) push(v T) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, v)
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return true
}

func (q *queue[T]) pop() (T, bool) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			v := q.items[0]
			var zero T
			q.items[0] = zero
			q.items = q.items[1:]
			q.mu.Unlock()
			return v, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			var zero T
			return zero, false
		}
		<-q.kick
	}
}

func (q *queue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// item is an issued collective: the wrapped group's Work and the Future
// the caller holds.
type item struct {
	w    pg.Work
	fut  *pg.Future
	seq  uint64
	op   pg.OpType
	info pg.WorkInfo // for the completion hooks
}

// job is a collective waiting for the fingerprint check (CheckCollectives),
// or, with marker set, a point that drain waits for.
type job struct {
	ctx    context.Context
	seq    uint64
	fp     fingerprint
	issue  func(context.Context) pg.Work
	fut    *pg.Future
	info   pg.WorkInfo
	marker chan struct{}
}

// issue gives the collective described by fp the next sequence number,
// records that this rank entered it, and issues it: at once (the caller
// gets a work), or, with CheckCollectives, through the checker once the
// ranks' fingerprints agree (the caller gets a Future that the monitor
// completes). A nil ctx is refused before anything is numbered.
func (g *Group) issue(ctx context.Context, fp fingerprint, sz sizes, call func(context.Context) pg.Work) pg.Work {
	if err := backend.CheckContext(ctx); err != nil {
		return pg.Completed(err)
	}
	g.issueMu.Lock()
	defer g.issueMu.Unlock()
	if g.opts.CheckCollectives {
		g.seq++
		g.mu.Lock()
		g.prog.enter(g.seq, fp)
		g.mu.Unlock()
		fut := pg.NewSeqFuture(g.seq)
		info := pg.WorkInfo{Op: fp.op, Seq: g.seq, Rank: g.rank, Dtype: sz.dtype, InBytes: sz.in, OutBytes: sz.out,
			Issued: time.Now()}
		if !g.jobs.push(job{ctx: ctx, seq: g.seq, fp: fp, issue: call, fut: fut, info: info}) {
			fut.Complete(g.closedErr(fp.op))
		}
		return fut
	}
	inner := call(ctx)
	if refused(inner) {
		return inner // not a collective: no number, nothing entered
	}
	g.seq++
	w := &work{g: g, w: inner, seq: g.seq, op: fp.op}
	g.mu.Lock()
	g.prog.enter(g.seq, fp)
	g.settleLocked()
	g.pending = append(g.pending, item{w: inner, seq: g.seq})
	g.mu.Unlock()
	return w
}

// refused reports whether the wrapped group turned a call down before
// issuing it: a finished, failed Work with no sequence number.
func refused(w pg.Work) bool {
	if w.Seq() != 0 {
		return false
	}
	select {
	case <-w.Done():
		return w.Err() != nil
	default:
		return false
	}
}

// settleLocked drops the finished collectives at the head of pending,
// advancing the last finished number. g.mu is held.
func (g *Group) settleLocked() {
	n := 0
	for _, it := range g.pending {
		select {
		case <-it.w.Done():
			g.prog.finished = max(g.prog.finished, it.seq)
			n++
			continue
		default:
		}
		break
	}
	if n > 0 {
		clear(g.pending[:n])
		g.pending = g.pending[n:]
	}
}

// work is the Work of a collective issued without the check: the wrapped
// group's Work, whose error, once it has one, is explained by the
// diagnosis. Done closes with the wrapped Work's; Err may then take up to
// Options.DiagnosisTimeout plus ProbeTimeout while the first diagnosis
// runs, and Wait until its ctx ends.
type work struct {
	g   *Group
	w   pg.Work
	seq uint64
	op  pg.OpType
}

func (w *work) Seq() uint64           { return w.seq }
func (w *work) Done() <-chan struct{} { return w.w.Done() }

// Times forwards the wrapped Work's times (pg.TimedWork), for pg/flight
// over this group.
func (w *work) Times() pg.OpTimes { return pg.TimesOf(w.w) }

func (w *work) Err() error {
	select {
	case <-w.w.Done():
		return w.result(context.Background())
	default:
		return nil
	}
}

func (w *work) Wait(ctx context.Context) error {
	err := w.w.Wait(ctx)
	select {
	case <-w.w.Done():
		return w.result(ctx)
	default:
		return err // ctx ended first
	}
}

func (w *work) result(ctx context.Context) error {
	if err := w.w.Err(); err != nil {
		return w.g.explain(ctx, w.seq, w.op, err)
	}
	return nil
}

// track hands an issued collective to the monitor.
func (g *Group) track(it item) {
	if !g.mon.push(it) {
		// Closed: the wrapped group is closed too, so it fails at once.
		<-it.w.Done()
		it.fut.CompleteAt(it.w.Err(), pg.TimesOf(it.w))
	}
}

// drain waits until the checker has issued every collective queued
// before it, so that a blocking call (MonitoredBarrier, NewGroup, Split)
// keeps its place in the order. g.issueMu is held.
func (g *Group) drain(ctx context.Context) error {
	if !g.opts.CheckCollectives {
		return nil
	}
	m := make(chan struct{})
	if !g.jobs.push(job{marker: m}) {
		return g.closedErr(pg.OpBarrier)
	}
	select {
	case <-m:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("desync: rank %d: waiting for earlier collectives to pass the check: %w", g.rank,
			context.Cause(ctx))
	}
}

// monitor waits for the issued collectives in order, records the last
// finished one, and turns a timeout, communication or remote error into
// the group's diagnosis.
func (g *Group) monitor() {
	defer close(g.monDone)
	for {
		it, ok := g.mon.pop()
		if !ok {
			return
		}
		<-it.w.Done() // the wrapped group finishes every Work, by its timeout or Close at the latest
		err := it.w.Err()
		g.mu.Lock()
		g.prog.finished = max(g.prog.finished, it.seq)
		g.mu.Unlock()
		if err != nil {
			err = g.explain(context.Background(), it.seq, it.op, err)
		}
		it.fut.CompleteAt(err, pg.TimesOf(it.w)) // the backend's times, for pg/flight over this group
		if g.hooks.Active() {
			info := it.info
			if info.Started.IsZero() {
				info.Started = time.Now()
			}
			info.Finished, info.Err = time.Now(), err
			g.hooks.Deliver(info)
		}
	}
}

// checker runs the fingerprint check of each queued collective on the
// wrapped group, then issues it (or fails it with the mismatch), one at
// a time in issue order.
func (g *Group) checker() {
	defer close(g.jobsDone)
	for {
		j, ok := g.jobs.pop()
		if !ok {
			return
		}
		if j.marker != nil {
			close(j.marker)
			continue
		}
		var w pg.Work
		if err := g.check(j.ctx, j.seq, j.fp); err != nil {
			w = pg.Completed(err)
		} else {
			j.info.Started = time.Now()
			w = j.issue(j.ctx)
		}
		g.track(item{w: w, fut: j.fut, seq: j.seq, op: j.fp.op, info: j.info})
	}
}

// check allgathers every rank's fingerprint of collective seq on the
// wrapped group and compares them.
func (g *Group) check(ctx context.Context, seq uint64, fp fingerprint) error {
	in := fp.encode()
	out := make([]byte, g.size*fpSize)
	w := g.inner.AllGather(ctx, pg.Tensor{Dtype: pg.Uint8, Data: out}, pg.Tensor{Dtype: pg.Uint8, Data: in})
	<-w.Done() // bounded by the wrapped group's timeout
	if err := w.Err(); err != nil {
		return fmt.Errorf("checking %v #%d across ranks: %w", fp.op, seq, err)
	}
	fps := make([]fingerprint, g.size)
	for r := range fps {
		fps[r] = decodeFingerprint(out[r*fpSize : (r+1)*fpSize])
	}
	return compare(g.rank, seq, fps)
}
