package tcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goddp/ddp/pg"
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
	taken   bool        // the executor or a Wait has taken it to run (Group.mu)
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
	return pg.Completed(&pg.CollectiveError{Op: typ.String(), Rank: g.rank, Peer: pg.NoPeer, Kind: pg.ErrInvalidArgument, Err: err})
}

// submit issues a collective: it takes the next sequence number and
// queues do for the executor, or for the caller's Wait (Note [the caller
// runs]). A nil ctx is refused before anything is taken.
func (g *Group) submit(ctx context.Context, typ pg.OpType, m meta, do func(*run) error) pg.Work {
	if err := pg.CheckContext(ctx); err != nil {
		return g.invalid(typ, err)
	}
	o := &op{typ: typ, name: typ.String(), ctx: ctx, issued: time.Now(), meta: m, do: do}
	kick, err := g.enqueue(o)
	if err != nil {
		return pg.Completed(g.annotate(err))
	}
	if kick {
		g.kick()
	}
	return &work{Future: o.fut, g: g, o: o}
}

// kick wakes the executor to run what is queued.
func (g *Group) kick() {
	select {
	case g.opKick <- struct{}{}:
	default:
	}
}

// enqueue numbers o and queues it, or returns the error of the group's
// failure (exited implies failed). It reports whether the executor must
// be kicked; when not, o is left for its caller's Wait and the lazy timer
// kicks the executor after lazyGrace if no Wait claims it first.
func (g *Group) enqueue(o *op) (kick bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f := g.failure.Load(); f != nil || g.exited {
		return false, f.errorFor(o.name, g.rank)
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
	if g.lazy != nil && !g.running && (len(g.queue) == 1 || g.armed) {
		if !g.armed {
			g.lazy.Reset(lazyGrace)
			g.armed = true
		}
		return false, nil
	}
	return true, nil
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
		g.runAndFinish(o)
		g.idle()
	}
}

// runAndFinish runs o and completes its Work.
func (g *Group) runAndFinish(o *op) {
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

// idle gives up the right to run collectives, which the executor or a
// caller's Wait took, and kicks the executor if more are queued.
func (g *Group) idle() {
	g.mu.Lock()
	g.running = false
	more := len(g.queue) > 0
	g.mu.Unlock()
	if more {
		g.kick()
	}
}

// next waits for the next queued op and takes the right to run it; nil
// means the group is closing and nothing is left.
func (g *Group) next() *op {
	for {
		g.mu.Lock()
		if len(g.queue) > 0 && !g.running {
			o := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			o.taken = true
			g.running = true
			g.armed = false
			g.mu.Unlock()
			return o
		}
		g.mu.Unlock()
		select {
		case <-g.opKick:
		case <-g.stopping:
			g.mu.Lock()
			// A caller's Wait that runs collectives holds the group's
			// WaitGroup itself, and kicks when it is done.
			empty := len(g.queue) == 0
			g.exited = empty // submit fails what comes later itself
			g.mu.Unlock()
			if empty {
				return nil
			}
			if g.isRunning() {
				<-g.opKick
			}
		}
	}
}

func (g *Group) isRunning() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
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
