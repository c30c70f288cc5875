package tcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Note [one collective at a time]: every rank issues collectives in the
// same order, and each gets the next sequence number. One executor
// goroutine per group runs them strictly in that order, as gloo does, so
// the algorithms are plain sequential code. Overlap comes from below: the
// per-link readers and writers move bytes while the executor reduces, and
// frames of later collectives that arrive early are kept in the link's
// mailbox, keyed by (seq, tag), until their collective runs.

// Note [sequence numbers]: on the wire, collectives are numbered from 0
// (the first collective's frames carry Seq 0); Work.Seq, WorkInfo.Seq and
// error messages count from 1, as c10d does: wire seq s is collective
// #s+1.

// op is one issued collective.
type op struct {
	typ     pg.OpType
	name    string
	seq     uint64 // on the wire; Work.Seq is seq+1
	ctx     context.Context
	issued  time.Time
	started time.Time
	meta    meta
	fut     *pg.Future
	do      func(*run) error
	stop    func() bool // unregisters the ctx watch
}

// meta is what a collective's WorkInfo says about its buffers.
type meta struct {
	dtype   pg.Dtype
	in, out int64
}

// inPlace is the meta of a collective on one tensor, in place.
func inPlace(t pg.Tensor) meta { return meta{t.Dtype, int64(len(t.Data)), int64(len(t.Data))} }

// outIn is the meta of a collective from in to out.
func outIn(out, in pg.Tensor) meta { return meta{in.Dtype, int64(len(in.Data)), int64(len(out.Data))} }

// invalid is the Work of a collective whose arguments are wrong.
func (g *Group) invalid(typ pg.OpType, err error) pg.Work {
	return pg.Completed(&pg.CollectiveError{Op: typ.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument,
		Err: err})
}

// submit issues a collective: it takes the next sequence number and
// queues do for the executor. A nil ctx is refused before anything is
// taken.
func (g *Group) submit(ctx context.Context, typ pg.OpType, m meta, do func(*run) error) pg.Work {
	if err := backend.CheckContext(ctx); err != nil {
		return g.invalid(typ, err)
	}
	o := &op{typ: typ, name: typ.String(), ctx: ctx, issued: time.Now(), meta: m, do: do}
	if err := g.enqueue(o); err != nil {
		return pg.Completed(g.annotate(err))
	}
	select {
	case g.opKick <- struct{}{}:
	default:
	}
	return o.fut
}

// enqueue numbers o and queues it, or returns the error of the group's
// failure (exited implies failed).
func (g *Group) enqueue(o *op) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.failure.Load(); f != nil || g.exited {
		return f.errorFor(o.name, g.rank)
	}
	o.seq = g.nextSeq
	g.nextSeq++
	o.fut = pg.NewSeqFuture(o.seq + 1)
	if o.ctx.Done() != nil {
		// The ranks are out of step once a collective is abandoned, so
		// the caller's ctx ending aborts the whole group (pg's contract).
		o.stop = context.AfterFunc(o.ctx, func() { g.cancelled(o) })
	}
	g.queue = append(g.queue, o)
	return nil
}

// cancelled aborts the group because o's ctx ended.
func (g *Group) cancelled(o *op) {
	g.fail(&failure{kind: pg.ErrAborted, peer: pg.NoPeer,
		err: fmt.Errorf("the context of %s #%d ended: %w", o.name, o.seq+1, context.Cause(o.ctx))}, kindAbort)
}

// execute is the executor goroutine: it runs the queued collectives one
// at a time, in issue order, until Close.
func (g *Group) execute() {
	defer g.wg.Done()
	for {
		o := g.next()
		if o == nil {
			return
		}
		err := g.annotate(g.runOne(o))
		if o.stop != nil {
			o.stop()
		}
		o.fut.Complete(err)
		if g.hooks.Active() {
			g.hooks.Deliver(pg.WorkInfo{Op: o.typ, Seq: o.seq + 1, Rank: g.rank, Dtype: o.meta.dtype,
				InBytes: o.meta.in, OutBytes: o.meta.out,
				Issued: o.issued, Started: o.started, Finished: time.Now(), Err: err})
		}
	}
}

// next waits for the next queued op; nil means the group is closing and
// nothing is left.
func (g *Group) next() *op {
	for {
		g.mu.Lock()
		if len(g.queue) > 0 {
			o := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			g.mu.Unlock()
			return o
		}
		g.mu.Unlock()
		select {
		case <-g.opKick:
		case <-g.stopping:
			g.mu.Lock()
			empty := len(g.queue) == 0
			g.exited = empty // submit fails what comes later itself
			g.mu.Unlock()
			if empty {
				return nil
			}
		}
	}
}

// runOne runs o and returns its result. A failed collective fails the
// group.
func (g *Group) runOne(o *op) error {
	o.started = time.Now()
	if o.ctx.Err() != nil {
		return g.ctxErr(o.name, o.ctx)
	}
	if f := g.failure.Load(); f != nil {
		return f.errorFor(o.name, g.rank)
	}
	g.curSeq.Store(o.seq)
	r := newRun(g, o)
	err := o.do(r)
	r.done()
	if f := g.failure.Load(); err == nil && f != nil {
		// Every frame was in, but a peer has failed meanwhile: it will not
		// go on, so neither does this rank.
		return f.errorFor(o.name, g.rank)
	}
	if err != nil {
		if o.ctx.Err() != nil {
			g.cancelled(o) // whichever of this and the ctx watch comes first
		}
		g.fail(failureOf(o.name, o.seq+1, err), finalFrame(g.rank, err))
		// Complete only once no reader can touch o's buffers, and the
		// peers have been told and have hung up (or closeGrace passed):
		// whoever sees this Work fail cannot then finish a collective
		// with this rank.
		<-g.writersDone
		<-g.readersDone
	}
	return err
}

// finalFrame is the last frame a rank whose collective failed with err
// sends its peers: an abort, so that their collectives fail at once and
// name the culprit. A failed monitored barrier is rank 0's verdict: rank 0
// aborts, after every arrived rank's answer; the others only relay it, so
// as not to overtake rank 0's answers on other connections.
func finalFrame(rank int, err error) uint8 {
	var mr *pg.MissingRanksError
	if errors.As(err, &mr) && rank != 0 {
		return kindRelay
	}
	return kindAbort
}

// ctxErr is the error of a collective whose caller's ctx ended.
func (g *Group) ctxErr(name string, ctx context.Context) error {
	return &pg.CollectiveError{Op: name, Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrTimeout, Err: context.Cause(ctx)}
}
