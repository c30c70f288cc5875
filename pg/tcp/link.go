package tcp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Frame kinds on a process-group connection.
const (
	kindData    uint8 = iota + 1 // a collective's payload, matched by (Seq, Tag)
	kindAbort                    // the sender's group failed; payload from encodeAbort
	kindGoodbye                  // the sender closed its group
	kindHello                    // the accepting side names its rank, once, after the handshake
	kindRelay                    // the sender's group failed because of another rank's abort; payload from encodeAbort
	kindP2P                      // a chunk of a Send's message: Seq its total length, Tag the user's tag
	kindP2PAck                   // a Recv took message Seq: Flags the outcome, payload the Recv's length
)

// Note [abort and relay]: a rank whose collective fails sends every peer
// an abort frame, and a rank that gets one fails its whole group at once,
// so that a peer that is not even talking to the failed rank stops too,
// blaming the rank at the root. The ranks that fail that way do not send
// aborts of their own, which could overtake frames the root sent before
// its abort (a monitored barrier's answer) on other connections. They
// send a relay frame instead, which fails only what waits on that link,
// and names the root rank too.

// key matches a data frame to the collective (Seq), step (Tag) and part
// of a coalesced collective (Flags) that waits for it.
type key struct {
	seq uint64
	tag uint32
	sub uint8
}

// slot is one expected or arrived data frame in a link's mailbox.
type slot struct {
	dst     []byte // where the frame goes, once posted
	buf     []byte // a pool buffer holding the frame, when it came before dst
	posted  bool
	arrived bool
	bad     error // the frame did not fit dst
}

// sendReq is one frame for a link's writer.
type sendReq struct {
	h       wire.Header
	p       []byte
	run     *run
	release bool          // p is a pool buffer: return it once written
	post    *link         // once written, post postDst on this link under postKey
	postKey key           //
	postDst []byte        //
	done    func(ok bool) // if not nil, called once the frame is written or dropped
}

// link is the connection to one peer: a mailbox the reader fills and the
// executor drains, and a queue the writer sends from.
type link struct {
	g    *Group
	peer int
	conn net.Conn

	mu    sync.Mutex
	slots map[key]slot
	err   error // why the link is unusable; nil while healthy
	kind  error // err's pg sentinel
	blame int   // the rank err names: the peer, or the root of a relayed failure
	shut  bool  // the group was torn down: readers must not touch buffers
	queue []sendReq
	spare []sendReq
	final []byte // the last frame to send: abort or goodbye
	fkind uint8

	closers  atomic.Int32  // how many of reader and writer are done with conn
	kick     chan struct{} // the writer has work (capacity 1)
	finalCh  chan struct{} // closed by teardown
	inflight atomic.Int64  // frames queued or being written

	p2p p2p // Send and Recv with this peer
}

func newLink(g *Group, peer int, conn net.Conn) *link {
	return &link{
		g: g, peer: peer, conn: conn,
		slots:   make(map[key]slot),
		kick:    make(chan struct{}, 1),
		finalCh: make(chan struct{}),
	}
}

// enqueue hands req to the writer, or fails at once if the link is dead.
func (l *link) enqueue(req sendReq) error {
	l.mu.Lock()
	if l.err != nil || l.shut {
		err := l.errLocked()
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, req)
	l.inflight.Add(1)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return nil
}

// errLocked is the link's error, or errShut after teardown.
func (l *link) errLocked() error {
	if l.err != nil {
		return l.err
	}
	return errShut
}

// post names dst as the destination of the frame k. If the frame came
// early it is copied in now; otherwise the reader will read it straight
// into dst.
func (l *link) post(k key, dst []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return errShut
	}
	s, ok := l.slots[k]
	switch {
	case !ok:
		l.slots[k] = slot{dst: dst, posted: true}
	case s.posted:
		return fmt.Errorf("internal error: frame %v posted twice", k)
	default: // arrived early, into a pool buffer
		if len(s.buf) != len(dst) {
			s.bad = sizeMismatch(l.peer, k, len(s.buf), len(dst))
		} else {
			copy(dst, s.buf)
		}
		l.g.pool.put(s.buf)
		l.slots[k] = slot{dst: dst, posted: true, arrived: true, bad: s.bad}
	}
	return nil
}

// take removes and returns frame k if it has arrived (and, with
// posted, if it went to its posted destination). Otherwise it returns
// the link's error if the link is dead, or ok false.
func (l *link) take(k key, posted bool) (s slot, ok bool, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s, ok := l.slots[k]; ok && s.arrived && (s.posted || !posted) {
		delete(l.slots, k)
		return s, true, nil
	}
	if l.err != nil {
		return slot{}, false, l.err
	}
	return slot{}, false, nil
}

// die marks the link unusable: every later send or receive on it fails
// with err, of pg kind. The first call wins and reports true. It closes
// the socket.
func (l *link) die(kind, err error, blame int) bool {
	l.mu.Lock()
	if l.err != nil || l.shut {
		l.mu.Unlock()
		return false
	}
	l.err, l.kind, l.blame = err, kind, blame
	q := l.queue
	l.queue = nil
	l.mu.Unlock()
	l.failQueued(q)
	l.conn.Close()
	l.failP2P(func(op string) error {
		return &pg.CollectiveError{Op: op, Rank: l.g.rank, Peer: blame, Kind: kind, Err: err}
	})
	l.g.signal()
	return true
}

// enqueueAll hands reqs to the writer together, so that they go out back
// to back, or fails at once if the link is dead.
func (l *link) enqueueAll(reqs []sendReq) error {
	l.mu.Lock()
	if l.err != nil || l.shut {
		err := l.errLocked()
		l.mu.Unlock()
		return err
	}
	l.queue = append(l.queue, reqs...)
	l.inflight.Add(int64(len(reqs)))
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return nil
}

// failQueued drops requests that will never be written.
func (l *link) failQueued(q []sendReq) {
	for i := range q {
		l.complete(&q[i], false)
	}
}

// complete finishes one send request, written or not.
func (l *link) complete(req *sendReq, ok bool) {
	if ok && req.post != nil {
		if err := req.post.post(req.postKey, req.postDst); err != nil && err != errShut {
			req.post.markBad(req.postKey, err)
		}
	}
	if req.release {
		l.g.pool.put(req.p)
	}
	l.inflight.Add(-1)
	if req.run != nil {
		req.run.sendDone(l, ok)
	}
	if req.done != nil {
		req.done(ok)
	}
	*req = sendReq{}
	l.g.signal()
}

// markBad records that frame k can never be delivered correctly.
func (l *link) markBad(k key, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.shut {
		l.slots[k] = slot{posted: true, arrived: true, bad: err}
	}
}

// teardown stops the link for good. The reader stops touching buffers
// at once and then drains the socket until the peer closes its side (so
// our close is a FIN, not a reset that could destroy the final frame in
// flight); the writer sends the final frame, if any and if the stream is
// still sound, within closeGrace and shuts its side down.
func (l *link) teardown(fkind uint8, payload []byte) {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return
	}
	l.shut = true // frames that have arrived stay takeable; nothing more comes in
	l.final, l.fkind = payload, fkind
	now := time.Now()
	// Kick the reader out of any read into a collective's buffer. Under
	// l.mu, so that the reader's own (later) drain deadline wins.
	l.conn.SetReadDeadline(now)
	l.mu.Unlock()
	l.conn.SetWriteDeadline(now.Add(closeGrace))
	close(l.finalCh)
}

// release is called by the reader and the writer when each is done with
// the socket; the second call closes it.
func (l *link) release() {
	if l.closers.Add(1) == 2 {
		l.conn.Close()
	}
}
