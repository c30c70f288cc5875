package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Note [point to point]: Send and Recv live beside the collectives, not
// in their sequence: they skip the executor and never wait for it, nor it
// for them. A Send is one message: its tensor cut into frames of at most
// ChunkBytes, of kind kindP2P, queued back to back on the link (so the
// frames of one message are contiguous on the stream), each carrying the
// message's total length in Seq and the user's tag in Tag. Messages on
// one link are numbered implicitly, 1, 2, ... in stream order, which is
// also the Send's Work.Seq; the receiver counts them the same way. The
// receiving reader matches each message, as its first frame arrives, to
// the oldest pending Recv from that peer with that tag, or keeps it until
// one comes (so a message with the same tag is never overtaken: MPI's
// rule). When a Recv has taken a whole message, the receiver answers with
// an ack (kindP2PAck: Seq the message number, Flags the outcome, payload
// the Recv's length), and the Send's Work completes on the ack, once its
// frames are written: a Send finishes only when the matching Recv does,
// as in gloo, and a length mismatch fails both sides. A chunk of a
// message that has its Recv is read straight into the Recv's tensor; the
// Recv counts the read as a pending frame, so that it cannot complete (by
// timing out, say) while the reader still writes into its tensor.

// Outcomes in an ack's Flags.
const (
	ackOK       uint8 = 0
	ackMismatch uint8 = 1
)

// p2p is one link's point-to-point state.
type p2p struct {
	mu      sync.Mutex
	sent    uint64                // messages sent; the next Send is sent+1
	posted  uint64                // Recvs issued
	arrived uint64                // messages whose first frame has come in
	sends   map[uint64]*p2pOp     // by message number: not yet acknowledged
	recvs   map[uint32][]*p2pOp   // Recvs by tag, oldest first, not yet matched
	early   map[uint32][]*p2pMsg  // messages by tag, oldest first, no Recv yet
	cur     *p2pMsg               // the message whose frames are arriving
	dead    func(op string) error // set once the link is dead: the error of every op
}

// p2pMsg is a message that is arriving or has arrived.
type p2pMsg struct {
	id         uint64
	tag        uint32
	total, got uint64
	buf        []byte // what has come so far, while no Recv has it
	recv       *p2pOp // the Recv it is matched to
	dropped    bool   // the Recv refused or abandoned it: drop the rest
}

// p2pOp is one Send or Recv.
type p2pOp struct {
	l      *link
	typ    pg.OpType
	t      pg.Tensor
	tag    uint32
	seq    uint64
	issued time.Time
	fut    *pg.Future
	timer  *time.Timer
	stop   func() bool // unregisters the ctx watch

	// Under l.p2p.mu.
	resolved bool    // err is the outcome
	err      error   //
	frames   int     // frames of a Send not yet written or dropped
	done     bool    // fut is complete
	msg      *p2pMsg // the message a Recv is taking
}

// Send sends t to rank dst. It matches the Recv on dst from this rank
// with the same tag; see pg.PointToPoint. The Work finishes once that
// Recv has taken the message; t must stay untouched until then.
func (g *Group) Send(ctx context.Context, t pg.Tensor, dst, tag int) pg.Work {
	if err := checkP2P(ctx, "send", t, dst, tag, g.rank, g.size); err != nil {
		return g.invalid(pg.OpSend, err)
	}
	if err := g.stopped(pg.OpSend); err != nil {
		return pg.Completed(err)
	}
	l := g.links[dst]
	o := &p2pOp{l: l, typ: pg.OpSend, t: t, tag: uint32(tag), issued: time.Now()}
	n := max(1, (len(t.Data)+g.opts.ChunkBytes-1)/g.opts.ChunkBytes)
	reqs := make([]sendReq, n)
	for i := range reqs {
		lo := min(i*g.opts.ChunkBytes, len(t.Data))
		hi := min(lo+g.opts.ChunkBytes, len(t.Data))
		reqs[i] = sendReq{h: headerP2P(uint64(len(t.Data)), o.tag), p: t.Data[lo:hi], done: o.frameDone}
	}
	s := &l.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil {
		return pg.Completed(g.annotate(s.dead(pg.OpSend.String())))
	}
	s.sent++
	o.seq = s.sent
	o.fut = pg.NewSeqFuture(o.seq)
	o.frames = n
	if s.sends == nil {
		s.sends = make(map[uint64]*p2pOp)
	}
	s.sends[o.seq] = o
	if err := l.enqueueAll(reqs); err != nil {
		delete(s.sends, o.seq)
		o.frames = 0
		o.resolveLocked(l.opErr(pg.OpSend.String(), err))
		return o.fut
	}
	o.watchLocked(ctx)
	return o.fut
}

// Recv receives the next message rank src sends this rank with tag into
// t, whose length must be the message's; see pg.PointToPoint.
func (g *Group) Recv(ctx context.Context, t pg.Tensor, src, tag int) pg.Work {
	if err := checkP2P(ctx, "recv", t, src, tag, g.rank, g.size); err != nil {
		return g.invalid(pg.OpRecv, err)
	}
	if err := g.stopped(pg.OpRecv); err != nil {
		return pg.Completed(err)
	}
	l := g.links[src]
	o := &p2pOp{l: l, typ: pg.OpRecv, t: t, tag: uint32(tag), issued: time.Now()}
	s := &l.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil {
		return pg.Completed(g.annotate(s.dead(pg.OpRecv.String())))
	}
	s.posted++
	o.seq = s.posted
	o.fut = pg.NewSeqFuture(o.seq)
	if q := s.early[o.tag]; len(q) > 0 {
		m := q[0]
		s.early[o.tag] = dequeue(q)
		l.matchLocked(m, o)
	} else {
		if s.recvs == nil {
			s.recvs = make(map[uint32][]*p2pOp)
		}
		s.recvs[o.tag] = append(s.recvs[o.tag], o)
	}
	if !o.done {
		o.watchLocked(ctx)
	}
	return o.fut
}

// stopped is the error of a Send or Recv on a group that has failed, was
// aborted or closed: the group's own state comes first, before that of
// the link to the peer, which may have died earlier (a peer that closed
// first).
func (g *Group) stopped(typ pg.OpType) error {
	if f := g.failure.Load(); f != nil {
		return g.annotate(f.errorFor(typ.String(), g.rank))
	}
	return nil
}

func checkP2P(ctx context.Context, what string, t pg.Tensor, peer, tag, rank, size int) error {
	if err := backend.CheckContext(ctx); err != nil {
		return err
	}
	if err := backend.CheckPeer(what, t, peer, tag, rank, size); err != nil {
		return err
	}
	if uint64(tag) > math.MaxUint32 {
		return fmt.Errorf("%w: %s tag %d does not fit in 32 bits", pg.ErrInvalidArgument, what, tag)
	}
	return nil
}

func headerP2P(total uint64, tag uint32) (h wire.Header) {
	h.Kind, h.Seq, h.Tag = kindP2P, total, tag
	return h
}

// dequeue drops the first element of q.
func dequeue[T any](q []*T) []*T {
	q[0] = nil
	if len(q) == 1 {
		return nil
	}
	return q[1:]
}

// watchLocked arms o's deadline (the group timeout from its issue) and
// the watch on the caller's ctx.
func (o *p2pOp) watchLocked(ctx context.Context) {
	g := o.l.g
	o.timer = time.AfterFunc(time.Until(o.issued.Add(g.opts.Timeout)), func() {
		o.expire(func() error {
			what := fmt.Sprintf("no Recv on rank %d took message #%d (tag %d)", o.l.peer, o.seq, o.tag)
			if o.typ == pg.OpRecv {
				what = fmt.Sprintf("rank %d sent no message with tag %d for Recv #%d", o.l.peer, o.tag, o.seq)
			}
			return o.errf(o.l.peer, pg.ErrTimeout, fmt.Errorf("%s within the group timeout %v", what, g.opts.Timeout))
		})
	})
	if ctx.Done() != nil {
		o.stop = context.AfterFunc(ctx, func() {
			o.expire(func() error { return g.ctxErr(o.typ.String(), ctx) })
		})
	}
}

// expire fails o, if it is still pending, with the error mk makes. A Send
// whose frames are not even written means the peer has stopped reading:
// the link dies.
func (o *p2pOp) expire(mk func() error) {
	l := o.l
	s := &l.p2p
	s.mu.Lock()
	if o.resolved {
		s.mu.Unlock()
		return
	}
	err := mk()
	stuck := o.typ == pg.OpSend && o.frames > 0
	switch o.typ {
	case pg.OpSend:
		delete(s.sends, o.seq) // a late ack is ignored
	case pg.OpRecv:
		if m := o.msg; m != nil {
			m.recv, m.dropped, o.msg = nil, true, nil
		} else {
			q := s.recvs[o.tag]
			for i, p := range q {
				if p == o {
					s.recvs[o.tag] = append(q[:i:i], q[i+1:]...)
					break
				}
			}
		}
	}
	o.resolveLocked(err)
	s.mu.Unlock()
	if stuck {
		l.die(pg.ErrTimeout,
			fmt.Errorf("rank %d took none of send #%d's data within the group timeout %v", l.peer, o.seq, l.g.opts.Timeout),
			l.peer)
	}
}

// frameDone is called by the writer for each of a Send's frames.
func (o *p2pOp) frameDone(ok bool) {
	l := o.l
	var err error
	if !ok {
		err = l.opErr(o.typ.String(), errShut) // decided before taking p2p.mu: lock order
	}
	s := &l.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	o.frames--
	if !ok && !o.resolved {
		delete(s.sends, o.seq)
		o.resolveLocked(err)
		return
	}
	o.completeLocked()
}

// resolveLocked settles o's outcome and completes it once its frames are
// out.
func (o *p2pOp) resolveLocked(err error) {
	if o.resolved {
		return
	}
	o.resolved, o.err = true, err
	o.completeLocked()
}

func (o *p2pOp) completeLocked() {
	if !o.resolved || o.frames > 0 || o.done {
		return
	}
	o.done = true
	if o.timer != nil {
		o.timer.Stop()
	}
	if o.stop != nil {
		o.stop()
	}
	g := o.l.g
	err := g.annotate(o.err)
	o.fut.Complete(err)
	if g.hooks.Active() {
		info := pg.WorkInfo{Op: o.typ, Seq: o.seq, Rank: g.rank, Dtype: o.t.Dtype,
			Issued: o.issued, Started: o.issued, Finished: time.Now(), Err: err}
		if o.typ == pg.OpSend { // the buffer read, or written
			info.InBytes = int64(len(o.t.Data))
		} else {
			info.OutBytes = int64(len(o.t.Data))
		}
		g.hooks.Deliver(info)
	}
}

func (o *p2pOp) errf(peer int, kind, err error) error {
	return &pg.CollectiveError{Op: o.typ.String(), Rank: o.l.g.rank, Peer: peer, Kind: kind, Err: err}
}

// opErr is the error of an op on l that failed with err: the link's
// failure or the group's.
func (l *link) opErr(op string, err error) error {
	l.mu.Lock()
	lerr, kind, blame := l.err, l.kind, l.blame
	l.mu.Unlock()
	if lerr == nil {
		if f := l.g.failure.Load(); f != nil {
			return f.errorFor(op, l.g.rank)
		}
		lerr, kind, blame = err, pg.ErrComm, l.peer
	}
	return &pg.CollectiveError{Op: op, Rank: l.g.rank, Peer: blame, Kind: kind, Err: lerr}
}

// failP2P fails every pending Send and Recv of the link, and every later
// one, with the error errFor makes. The first call wins.
func (l *link) failP2P(errFor func(op string) error) {
	s := &l.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil {
		return
	}
	s.dead = errFor
	for _, o := range s.sends {
		o.resolveLocked(errFor(o.typ.String()))
	}
	for _, q := range s.recvs {
		for _, o := range q {
			o.resolveLocked(errFor(o.typ.String()))
		}
	}
	if m := s.cur; m != nil && m.recv != nil {
		m.recv.resolveLocked(errFor(m.recv.typ.String()))
		m.recv = nil
	}
	s.sends, s.recvs, s.early, s.cur = nil, nil, nil, nil
}

// matchLocked gives message m to Recv o. A Recv of another length fails,
// and so does the Send; otherwise what has come so far is copied in.
func (l *link) matchLocked(m *p2pMsg, o *p2pOp) {
	if uint64(len(o.t.Data)) != m.total {
		m.dropped, m.buf = true, nil
		o.resolveLocked(o.errf(l.peer, pg.ErrInvalidArgument, fmt.Errorf(
			"%w: rank %d's message #%d (tag %d) holds %d bytes but this Recv's tensor holds %d: sender and receiver must "+
				"agree on the length",
			pg.ErrInvalidArgument, l.peer, m.id, m.tag, m.total, len(o.t.Data))))
		l.ackLocked(m.id, ackMismatch, len(o.t.Data))
		return
	}
	copy(o.t.Data, m.buf)
	m.buf = nil
	m.recv, o.msg = o, m
	if m.got == m.total {
		l.finishLocked(m)
	}
}

// finishLocked completes the Recv that took all of m.
func (l *link) finishLocked(m *p2pMsg) {
	o := m.recv
	m.recv, o.msg = nil, nil
	o.resolveLocked(nil)
	l.ackLocked(m.id, ackOK, len(o.t.Data))
}

// ackLocked tells the sender how message id was taken. If the link is
// dead the sender finds out anyway.
func (l *link) ackLocked(id uint64, outcome uint8, n int) {
	p := binary.LittleEndian.AppendUint64(nil, uint64(n))
	h := wire.Header{Kind: kindP2PAck, Flags: outcome, Seq: id}
	_ = l.enqueue(sendReq{h: h, p: p})
}

// p2pFrame reads a kindP2P frame: a chunk of message number arrived (or
// arrived+1, when it is the first). A chunk for a Recv goes straight
// into its tensor; the Recv cannot complete meanwhile (its frames count
// holds it), so nothing is written into a tensor after its Work is done.
// Any other chunk is read into a pool buffer and kept, or dropped.
func (l *link) p2pFrame(h wire.Header, r io.Reader) error {
	n := int(h.Len)
	s := &l.p2p
	s.mu.Lock()
	m, err := l.messageLocked(h)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	lo := m.got
	o := m.recv
	if o != nil {
		o.frames++
	}
	s.mu.Unlock()

	var buf []byte
	if o != nil {
		_, err = io.ReadFull(r, o.t.Data[lo:lo+uint64(n)])
	} else {
		buf, err = l.g.pool.readFull(r, n)
		defer l.g.pool.put(buf)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if o != nil {
		o.frames--
		o.completeLocked() // if it expired or failed meanwhile
	}
	if err != nil {
		return err
	}
	if s.dead != nil {
		return errShut
	}
	if buf != nil {
		switch {
		case m.recv != nil: // matched while the chunk was read
			copy(m.recv.t.Data[lo:], buf)
		case !m.dropped:
			m.buf = appendGrow(m.buf, buf, m.total)
		}
	}
	m.got += uint64(n)
	if m.got == m.total {
		s.cur = nil
		if m.recv != nil {
			l.finishLocked(m)
		}
	}
	return nil
}

// messageLocked returns the message a kindP2P frame with header h belongs
// to: the one arriving, or a new one, matched to the oldest Recv waiting
// for its tag, if any. It checks that the frame fits.
func (l *link) messageLocked(h wire.Header) (*p2pMsg, error) {
	s := &l.p2p
	if s.dead != nil {
		return nil, errShut
	}
	m := s.cur
	if m == nil {
		s.arrived++
		m = &p2pMsg{id: s.arrived, tag: h.Tag, total: h.Seq}
		s.cur = m
		if q := s.recvs[h.Tag]; len(q) > 0 {
			o := q[0]
			s.recvs[h.Tag] = dequeue(q)
			l.matchLocked(m, o)
		} else {
			if s.early == nil {
				s.early = make(map[uint32][]*p2pMsg)
			}
			s.early[h.Tag] = append(s.early[h.Tag], m)
		}
	} else if m.tag != h.Tag || m.total != h.Seq {
		return nil, &linkErr{pg.ErrComm,
			fmt.Errorf("protocol error: message #%d (tag %d, %d bytes) interrupted by a frame of tag %d and length %d", m.id,
				m.tag, m.total, h.Tag, h.Seq), l.peer}
	}
	if n := uint64(h.Len); n > m.total-m.got || (n == 0 && m.total > 0) {
		return nil, &linkErr{pg.ErrComm, fmt.Errorf("protocol error: message #%d overruns its length %d", m.id, m.total),
			l.peer}
	}
	return m, nil
}

// p2pAck acts on the ack of message h.Seq.
func (l *link) p2pAck(h wire.Header, p []byte) error {
	s := &l.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil {
		return errShut
	}
	if h.Seq == 0 || h.Seq > s.sent || len(p) != 8 || h.Flags > ackMismatch {
		return &linkErr{pg.ErrComm, fmt.Errorf("protocol error: bad ack of message #%d", h.Seq), l.peer}
	}
	o := s.sends[h.Seq]
	if o == nil {
		return nil // the Send gave up already
	}
	delete(s.sends, h.Seq)
	var err error
	if h.Flags == ackMismatch {
		err = o.errf(l.peer, pg.ErrInvalidArgument, fmt.Errorf(
			"%w: this Send (#%d, tag %d) holds %d bytes but rank %d's matching Recv takes %d: sender and receiver must agree "+
				"on the length",
			pg.ErrInvalidArgument, o.seq, o.tag, len(o.t.Data), l.peer, binary.LittleEndian.Uint64(p)))
	}
	o.resolveLocked(err)
	return nil
}

// appendGrow appends b to an early message's buffer, doubling its
// capacity as needed, up to the message's total: the total is the
// sender's claim, so the buffer grows with the bytes that arrive.
func appendGrow(buf, b []byte, total uint64) []byte {
	if need := len(buf) + len(b); need > cap(buf) {
		grown := make([]byte, len(buf), min(max(2*cap(buf), need), int(min(total, math.MaxInt))))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, b...)
}
