package tcp

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// run is one collective while the executor runs it: the primitives the
// algorithms are written in. Sends are asynchronous (the link's writer
// takes them); receives either name their destination in advance (post,
// then waitPosted) or take the frame in a pool buffer (recv). Every wait
// ends when the frame arrives, the peer's link dies, the collective's
// deadline passes, the caller's ctx ends or the group fails.
type run struct {
	g        *Group
	op       string
	seq      uint64
	sub      uint8 // the part of a coalesced collective running: frames carry it in Flags
	ctx      context.Context
	ctxDone  <-chan struct{}
	deadline time.Time
	timer    *time.Timer
	pending  atomic.Int64 // sends not yet written
	sendFail atomic.Int64 // 1 + the peer of the first send that failed; 0 if none
}

func newRun(g *Group, o *op) *run {
	r := &run{g: g, op: o.name, seq: o.seq, ctx: o.ctx, ctxDone: o.ctx.Done()}
	r.deadline = o.issued.Add(g.opts.Timeout)
	r.timer = time.NewTimer(time.Until(r.deadline))
	return r
}

func (r *run) done() { r.timer.Stop() }

// setDeadline moves the collective's deadline (MonitoredBarrier does).
func (r *run) setDeadline(t time.Time) {
	r.deadline = t
	r.timer.Reset(time.Until(t))
}

func (r *run) key(tag uint32) key { return key{r.seq, tag, r.sub} }

// header is the header of this run's data frame tag.
func (r *run) header(tag uint32) wire.Header {
	return wire.Header{Kind: kindData, Flags: r.sub, Seq: r.seq, Tag: tag}
}

// send queues p for l under tag. p must stay untouched until flush.
func (r *run) send(l *link, tag uint32, p []byte) error {
	return r.enqueue(l, sendReq{h: r.header(tag), p: p, run: r})
}

// sendPooled sends a pool buffer, which goes back to the pool once written.
func (r *run) sendPooled(l *link, tag uint32, p []byte) error {
	return r.enqueue(l, sendReq{h: r.header(tag), p: p, run: r, release: true})
}

// sendThenPost sends p to l and, once it is written, posts dst (usually
// p itself) as the destination of frame ptag from link from: the region
// is free for the incoming frame only after the kernel has taken it.
func (r *run) sendThenPost(l *link, tag uint32, p []byte, from *link, ptag uint32, dst []byte) error {
	return r.enqueue(l, sendReq{h: r.header(tag), p: p, run: r, post: from, postKey: r.key(ptag), postDst: dst})
}

func (r *run) enqueue(l *link, req sendReq) error {
	r.pending.Add(1)
	if err := l.enqueue(req); err != nil {
		r.pending.Add(-1)
		if req.release {
			r.g.pool.put(req.p)
		}
		return r.linkErr(l, err)
	}
	return nil
}

// sendDone is called by a writer for each of this run's frames.
func (r *run) sendDone(l *link, ok bool) {
	if !ok {
		r.sendFail.CompareAndSwap(0, int64(l.peer)+1)
	}
	r.pending.Add(-1)
}

// post names dst as the destination of frame tag from l.
func (r *run) post(l *link, tag uint32, dst []byte) error {
	if err := l.post(r.key(tag), dst); err != nil {
		return r.linkErr(l, err)
	}
	return nil
}

// waitPosted waits until frame tag from l is in its posted destination.
func (r *run) waitPosted(l *link, tag uint32) error {
	k := r.key(tag)
	for {
		s, ok, err := l.take(k, true)
		if ok {
			if s.bad != nil {
				return r.errf(l.peer, pg.ErrMismatch, s.bad)
			}
			return nil
		}
		if err := r.check(l, err); err != nil {
			return err
		}
		if err := r.block(l.peer); err != nil {
			return err
		}
	}
}

// recv waits for frame tag from l and returns it in a pool buffer, which
// the caller gives back with release. It must be n bytes long; n < 0
// accepts a control-sized frame of any length.
func (r *run) recv(l *link, tag uint32, n int) ([]byte, error) {
	k := r.key(tag)
	for {
		s, ok, err := l.take(k, false)
		if ok {
			if s.bad != nil || s.posted || (n >= 0 && len(s.buf) != n) || (n < 0 && len(s.buf) > maxControl) {
				r.release(s.buf)
				return nil, r.errf(l.peer, pg.ErrMismatch, sizeMismatch(l.peer, k, len(s.buf), n))
			}
			return s.buf, nil
		}
		if err := r.check(l, err); err != nil {
			return nil, err
		}
		if err := r.block(l.peer); err != nil {
			return nil, err
		}
	}
}

// release gives a buffer from recv back to the pool.
func (r *run) release(b []byte) { r.g.pool.put(b) }

// flush waits until every frame this collective sent is written.
func (r *run) flush() error {
	for r.pending.Load() > 0 {
		if err := r.sendErr(); err != nil {
			return err
		}
		if err := r.block(r.stuckPeer()); err != nil {
			return err
		}
	}
	return r.sendErr()
}

// check turns a dead link, or a send that failed, into the collective's error.
func (r *run) check(l *link, err error) error {
	if err != nil {
		return r.linkErr(l, err)
	}
	return r.sendErr()
}

func (r *run) sendErr() error {
	if p := r.sendFail.Load(); p != 0 {
		l := r.g.links[p-1]
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		if err == nil {
			err = errShut
		}
		return r.linkErr(l, err)
	}
	return nil
}

// stuckPeer names a peer whose frames are still being written, for a
// timeout's error.
func (r *run) stuckPeer() int {
	for _, l := range r.g.links {
		if l != nil && l.inflight.Load() > 0 {
			return l.peer
		}
	}
	return pg.NoPeer
}

// block waits for the doorbell and reports why it cannot wait any longer.
func (r *run) block(peer int) error {
	select {
	case <-r.g.wake:
		return nil
	case <-r.timer.C:
		return r.errf(peer, pg.ErrTimeout,
			fmt.Errorf("collective #%d made no progress with rank %d before its deadline (group timeout %v)", r.seq+1, peer,
				r.g.opts.Timeout))
	case <-r.ctxDone:
		return r.g.ctxErr(r.op, r.ctx)
	case <-r.g.failed:
		return r.g.failure.Load().errorFor(r.op, r.g.rank)
	}
}

// linkErr is the collective's error for a failure on link l.
func (r *run) linkErr(l *link, err error) error {
	if err == errShut {
		if f := r.g.failure.Load(); f != nil {
			return f.errorFor(r.op, r.g.rank)
		}
	}
	l.mu.Lock()
	kind, blame := l.kind, l.blame
	l.mu.Unlock()
	if kind == nil {
		kind, blame = pg.ErrComm, l.peer
	}
	return r.errf(blame, kind, err)
}

func (r *run) errf(peer int, kind, err error) error {
	return &pg.CollectiveError{Op: r.op, Rank: r.g.rank, Peer: peer, Kind: kind, Err: err}
}
