package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// readBuffer is the reader's buffer: big enough to take a small frame and
// its header in one read, small enough that a large payload is read
// straight into its destination rather than through it.
const readBuffer = 32 << 10

// linkErr is a reason for a link to die, with its pg kind and, for a
// relayed failure, the rank at its root.
type linkErr struct {
	kind  error
	err   error
	blame int
}

func (e *linkErr) Error() string { return e.err.Error() }
func (e *linkErr) Unwrap() error { return e.err }

// readLoop is a link's receiving goroutine: it reads frames and hands
// each to the collective step waiting for it, or keeps it until one does.
// It never blocks on anything but the socket, so a peer's death is seen
// at once whatever the executor is doing.
func (l *link) readLoop() {
	defer l.g.wg.Done()
	defer l.release()
	defer l.g.readerOut()
	br := bufio.NewReaderSize(l.conn, readBuffer)
	var hb [wire.HeaderSize]byte
	for {
		h, err := wire.ReadHeader(br, &hb, uint32(l.g.opts.MaxFrame))
		if err == nil {
			err = l.handle(h, br)
		}
		if err != nil {
			if l.drainable() {
				io.Copy(io.Discard, br) // until the peer's FIN, or closeGrace
				return
			}
			l.readFailed(err)
			return
		}
	}
}

// drainable reports whether the link was torn down and, if so, gives the
// reader closeGrace to drain it.
func (l *link) drainable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		l.conn.SetReadDeadline(time.Now().Add(closeGrace))
	}
	return l.shut
}

// handle acts on one frame whose header has been read.
func (l *link) handle(h wire.Header, r *bufio.Reader) error {
	switch h.Kind {
	case kindData:
		if h.Seq < l.g.curSeq.Load() {
			return &linkErr{pg.ErrComm,
				fmt.Errorf("protocol error: frame for collective #%d, which has already finished", h.Seq+1), l.peer}
		}
		return l.deliver(key{h.Seq, h.Tag, h.Flags}, int(h.Len), r)
	case kindP2P:
		return l.p2pFrame(h, r)
	case kindP2PAck:
		p, err := l.readControl(h, r)
		if err != nil {
			return err
		}
		return l.p2pAck(h, p)
	case kindAbort:
		p, err := l.readControl(h, r)
		if err != nil {
			return err
		}
		f, err := decodeAbort(p, l.peer, l.g.rank, l.g.size)
		if err != nil {
			return &linkErr{pg.ErrComm, err, l.peer}
		}
		l.g.fail(f, kindRelay)
		return errShut
	case kindRelay:
		p, err := l.readControl(h, r)
		if err != nil {
			return err
		}
		f, err := decodeAbort(p, l.peer, l.g.rank, l.g.size)
		if err != nil {
			return &linkErr{pg.ErrComm, err, l.peer}
		}
		return &linkErr{f.kind, f.err, f.peer}
	case kindGoodbye:
		return &linkErr{pg.ErrRemote, fmt.Errorf("rank %d closed its process group", l.peer), l.peer}
	}
	return &linkErr{pg.ErrComm, fmt.Errorf("protocol error: unknown frame kind %d", h.Kind), l.peer}
}

// deliver reads a data frame of n bytes: straight into its posted
// destination, or into a pool buffer until one is posted, which grows as
// the bytes arrive (pool.readFull).
func (l *link) deliver(k key, n int, r io.Reader) error {
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		return errShut
	}
	s, ok := l.slots[k]
	if ok && s.arrived {
		l.mu.Unlock()
		return &linkErr{pg.ErrComm, fmt.Errorf("protocol error: frame %v received twice", k), l.peer}
	}
	if ok && len(s.dst) != n {
		l.mu.Unlock()
		return &linkErr{pg.ErrMismatch, sizeMismatch(l.peer, k, n, len(s.dst)), l.peer}
	}
	l.mu.Unlock()
	if ok { // posted: zero copy
		if _, err := io.ReadFull(r, s.dst); err != nil {
			return err
		}
		l.mu.Lock()
		s.arrived = true
		l.slots[k] = s
		l.mu.Unlock()
		l.g.signal()
		return nil
	}
	buf, err := l.g.pool.readFull(r, n)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.shut {
		l.mu.Unlock()
		l.g.pool.put(buf)
		return errShut
	}
	s, ok = l.slots[k]
	switch {
	case ok && s.arrived:
		l.mu.Unlock()
		l.g.pool.put(buf)
		return &linkErr{pg.ErrComm, fmt.Errorf("protocol error: frame %v received twice", k), l.peer}
	case ok: // posted while the frame was being read
		if len(s.dst) != n {
			s.bad = sizeMismatch(l.peer, k, n, len(s.dst))
		} else {
			copy(s.dst, buf)
		}
		l.g.pool.put(buf)
		s.arrived = true
	default:
		s = slot{buf: buf, arrived: true}
	}
	l.slots[k] = s
	l.mu.Unlock()
	l.g.signal()
	return nil
}

// readControl reads the payload of a control frame, which is small.
func (l *link) readControl(h wire.Header, r io.Reader) ([]byte, error) {
	if h.Len > maxControl {
		return nil, &linkErr{pg.ErrComm,
			fmt.Errorf("protocol error: control frame of %d bytes exceeds %d", h.Len, maxControl), l.peer}
	}
	p := make([]byte, h.Len)
	_, err := io.ReadFull(r, p)
	return p, err
}

// readFailed kills the link with the reason the reader stopped, unless
// the group was torn down (the reader was told to stop).
func (l *link) readFailed(err error) {
	var le *linkErr
	switch {
	case errors.As(err, &le):
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		le = &linkErr{pg.ErrComm,
			fmt.Errorf("rank %d closed the connection without a goodbye (did its process exit or crash?): %w", l.peer, err),
			l.peer}
	default:
		le = &linkErr{pg.ErrComm, fmt.Errorf("receiving from rank %d: %w", l.peer, err), l.peer}
	}
	if l.die(le.kind, le.err, le.blame) {
		if le.kind == pg.ErrRemote {
			l.g.byes.note(l.peer) // Note [one goodbye line]
		} else {
			l.g.log.Warn("lost connection to peer", zap.Int("peer", l.peer), zap.Error(le.err))
		}
	}
}

// sizeMismatch is the error for a frame whose size is not the one the
// collective expects: the ranks disagree on a tensor's length.
func sizeMismatch(peer int, k key, got, want int) error {
	return fmt.Errorf("%w: rank %d sent %d bytes for step %d of collective #%d, this rank expects %d (do the ranks pass "+
		"tensors of the same length and dtype?)",
		pg.ErrMismatch, peer, got, k.tag, k.seq+1, want)
}
