package nccl

import (
	"context"
	"time"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// A collective is issued in three phases, all enqueued on the group's
// stream under the issue lock: uploads (caller's tensor -> pinned ->
// device), the NCCL calls (inside one ncclGroupStart/End when there are
// several), and downloads (device -> pinned); then an event is recorded.
// The watchdog copies pinned -> caller's tensor once the event passes.
// The phases are separate because inside an NCCL group the collectives
// launch at ncclGroupEnd: a download enqueued before it would run first.

// part is one NCCL call of a collective and the copies around it.
type part struct {
	upload, comm, download func() error
}

// desc describes a Work for the flight recorder and the hooks.
type desc struct {
	op                pg.OpType
	peer              int
	dtype             pg.Dtype
	inBytes, outBytes int64
}

// stager builds the parts of one Work.
type stager struct {
	g       *Group
	w       *work
	cleanup []func() // after the NCCL calls (PreMulSum ops)
}

// buffer takes a staging buffer of n bytes for the Work.
func (s *stager) buffer(n int) (*buf, error) {
	b, err := s.g.pool.get(n)
	if err != nil {
		return nil, err
	}
	s.w.bufs = append(s.w.bufs, b)
	return b, nil
}

// upload enqueues data -> b at off.
func (s *stager) upload(b *buf, off int, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	h := b.host[off : off+len(data)]
	copy(h, data)
	return s.g.be.H2D(b.dev+libnccl.DevicePtr(off), h)
}

// download enqueues b at off -> pinned, and registers the copy into dst
// (nil dst: the pinned bytes are returned for a post step).
func (s *stager) download(b *buf, off int, n int, dst []byte) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	h := b.host[off : off+n]
	if err := s.g.be.D2H(h, b.dev+libnccl.DevicePtr(off)); err != nil {
		return nil, err
	}
	if dst != nil {
		s.w.copies = append(s.w.copies, copyBack{dst: dst, src: h})
	}
	return h, nil
}

// issue runs build under the issue lock, enqueues its parts and returns
// the Work. build may return parts; an error from build is the caller's
// (bad arguments found late) and fails only this Work, an error while
// enqueueing fails the group, since the ranks are now out of step. A nil
// ctx is refused before anything is numbered.
func (g *Group) issue(ctx context.Context, d desc, build func(s *stager) ([]part, error)) pg.Work {
	if err := backend.CheckContext(ctx); err != nil {
		return g.invalid(d.op, d.peer, err)
	}
	w, refused, err := g.stage(ctx, d, build)
	switch {
	case w == nil: // the group has failed
		return pg.Completed(refused)
	case refused != nil:
		g.pool.put(w.bufs...)
		ce := &pg.CollectiveError{Op: d.op.String(), Rank: g.rank, Peer: d.peer, Kind: kindOf(refused), Err: refused}
		w.finish(g, ce, time.Now(), time.Time{})
		return w.fut
	case err != nil:
		g.fail(kindOf(err), err, w)
		return w.fut
	}
	select {
	case g.kick <- struct{}{}:
	default:
	}
	return w.fut
}

// stage numbers the Work of d and, under the issue lock, builds and
// enqueues its parts. It returns a nil Work and the group's failure if
// the group has failed; else the Work, build's error if build refused the
// arguments, and the error of enqueueing it.
func (g *Group) stage(ctx context.Context, d desc, build func(s *stager) ([]part, error)) (w *work, refused,
	err error) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.failedLocked(); err != nil {
		return nil, &pg.CollectiveError{Op: d.op.String(), Rank: g.rank, Peer: d.peer, Kind: kindOfFailure(err),
			Err: err}, nil
	}
	var seq uint64
	if d.op.IsPointToPoint() {
		k := p2pKey{d.op, d.peer}
		g.p2pSeq[k]++
		seq = g.p2pSeq[k]
	} else {
		g.seq++
		seq = g.seq
	}
	w = &work{fut: pg.NewSeqFuture(seq), op: d.op, seq: seq, peer: d.peer, dtype: d.dtype, inBytes: d.inBytes,
		outBytes: d.outBytes, issued: now, deadline: now.Add(g.opts.Timeout), ctx: ctx}
	s := &stager{g: g, w: w}
	parts, err := build(s)
	if err != nil {
		return w, err, nil
	}
	g.pending = append(g.pending, w)
	return w, nil, g.enqueue(s, parts)
}

// enqueue runs the three phases and records the Work's event.
func (g *Group) enqueue(s *stager, parts []part) error {
	defer func() {
		for _, f := range s.cleanup {
			f()
		}
	}()
	if err := g.waitSealed(); err != nil { // device buckets: devbucket.go
		return err
	}
	for _, p := range parts {
		if p.upload != nil {
			if err := p.upload(); err != nil {
				return err
			}
		}
	}
	comms := func() error {
		for _, p := range parts {
			if p.comm != nil {
				if err := p.comm(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := g.recordTiming(&s.w.start); err != nil {
		return err
	}
	var err error
	if len(parts) > 1 {
		err = g.be.Group(comms)
	} else {
		err = comms()
	}
	if err != nil {
		return err
	}
	if err := g.recordTiming(&s.w.stop); err != nil {
		return err
	}
	for _, p := range parts {
		if p.download != nil {
			if err := p.download(); err != nil {
				return err
			}
		}
	}
	ev, err := g.be.Record()
	if err != nil {
		return err
	}
	s.w.ev = ev
	return nil
}

// recordTiming records a timing event into *ev with Options.EnableTiming
// (Note [watchdog times]).
func (g *Group) recordTiming(ev *binding.Event) error {
	if !g.opts.EnableTiming {
		return nil
	}
	e, err := g.be.RecordTiming()
	*ev = e
	return err
}

// kindOfFailure is the sentinel of the group's failure.
func kindOfFailure(err error) error {
	if ce, ok := err.(*pg.CollectiveError); ok {
		return ce.Kind
	}
	return pg.ErrComm
}

// invalid returns a finished Work for arguments refused before issue.
func (g *Group) invalid(op pg.OpType, peer int, err error) pg.Work {
	return pg.Completed(&pg.CollectiveError{Op: op.String(), Rank: g.rank, Peer: peer, Kind: pg.ErrInvalidArgument,
		Err: err})
}
