package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"go.uber.org/zap"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

const (
	maxBatch      = 32      // frames gathered into one writev
	maxBatchBytes = 2 << 20 // payload bytes gathered into one writev
)

// errShut is what link operations return once the group is torn down; it
// never reaches a caller, who sees the group's failure instead.
var errShut = errors.New("tcp: link shut down")

// writer is a link's sending goroutine. It gathers queued frames into one
// writev (header, payload, header, payload, ...) and finishes each request
// once the kernel has taken it, so the executor can reduce while the next
// chunk is on its way.
type writer struct {
	l      *link
	hdr    [maxBatch][wire.HeaderSize]byte
	iov    [][]byte
	nb     net.Buffers
	pace   pacer
	broken bool // a frame was cut short: the stream is no longer sound
}

func (l *link) writeLoop() {
	defer l.g.wg.Done()
	w := &writer{l: l, iov: make([][]byte, 0, 2*maxBatch), pace: pacer{rate: float64(l.g.opts.LinkBytesPerSec)}}
	for {
		select {
		case <-l.finalCh:
			w.finish()
			return
		case <-l.kick:
		}
		l.mu.Lock()
		batch := l.queue
		l.queue, l.spare = l.spare[:0], nil
		l.mu.Unlock()
		w.write(batch)
		l.mu.Lock()
		if l.spare == nil && l.err == nil {
			l.spare = batch[:0]
		}
		l.mu.Unlock()
	}
}

// write sends batch in order, a writev at a time.
func (w *writer) write(batch []sendReq) {
	l := w.l
	for i := 0; i < len(batch); {
		j, bytes := i, 0
		w.iov = w.iov[:0]
		for j < len(batch) && j-i < maxBatch && (j == i || bytes+len(batch[j].p) <= maxBatchBytes) {
			req := &batch[j]
			req.h.Len = uint32(len(req.p))
			req.h.Put(w.hdr[j-i][:])
			w.iov = append(w.iov, w.hdr[j-i][:])
			if len(req.p) > 0 {
				w.iov = append(w.iov, req.p)
			}
			bytes += len(req.p)
			j++
		}
		err := w.flush()
		for k := i; k < j; k++ {
			l.complete(&batch[k], err == nil)
		}
		if err != nil {
			w.broken = true
			err = fmt.Errorf("sending to rank %d: %w", l.peer, err)
			if l.die(pg.ErrComm, err, l.peer) {
				l.g.log.Warn("lost connection to peer", zap.Int("peer", l.peer), zap.Error(err))
			}
			for k := j; k < len(batch); k++ {
				l.complete(&batch[k], false)
			}
			return
		}
		i = j
	}
}

// flush writes w.iov: with one writev, or paced in slices when the link
// has a bandwidth limit.
func (w *writer) flush() error {
	if w.pace.rate <= 0 {
		w.nb = net.Buffers(w.iov)
		_, err := w.nb.WriteTo(w.l.conn)
		w.nb = nil
		return err
	}
	for _, b := range w.iov {
		for len(b) > 0 {
			n := min(len(b), w.pace.slice())
			if err := w.sleep(w.pace.delay(n)); err != nil {
				return err
			}
			if _, err := w.l.conn.Write(b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	return nil
}

// sleep waits d, or until the link is torn down.
func (w *writer) sleep(d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-w.l.finalCh:
		return errShut
	}
}

// finish fails what is still queued, sends the final frame if the stream
// is sound, and shuts down the sending side.
func (w *writer) finish() {
	l := w.l
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	dead := l.err != nil
	frame, fkind := l.final, l.fkind
	l.mu.Unlock()
	l.failQueued(q)
	if !dead && !w.broken && fkind != 0 {
		wire.WriteFrame(l.conn, wire.Header{Kind: fkind}, frame)
	}
	if tc, ok := l.conn.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	l.g.writerOut()
	l.release()
}

// pacer spaces writes to emulate a link of rate bytes per second.
type pacer struct {
	rate float64
	next time.Time
}

// slice is how many bytes to write at once: about 10 ms worth.
func (p *pacer) slice() int {
	return int(min(64<<10, max(1<<10, p.rate/100)))
}

// delay books n bytes and returns how long to wait before sending them.
func (p *pacer) delay(n int) time.Duration {
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	d := p.next.Sub(now)
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	return d
}
