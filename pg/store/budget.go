package store

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Note [frame budget]
//
// A frame's header announces its length, up to MaxFrame (16 MiB). A server
// that allocated that much as soon as it read the header would let 40
// authenticated connections that each announce 16 MiB and send nothing
// more cost rank 0 640 MiB. So a payload is read as it arrives, into a buffer that starts at firstChunk and doubles
// as it fills, so a frame costs what its peer has sent (at most twice
// that), not what it claimed. And the bytes of the frames being read,
// across every connection, are charged to one budget, MaxInflight
// (64 MiB): a growth that would exceed it waits until other frames are
// done, up to budgetWait (10 s), and the connection is then dropped with
// an error saying so. The oldest frame never waits, so frames that each
// hold part of the budget cannot wait for each other. The first chunk of
// every frame is charged without waiting, so the small requests of a
// rendezvous are never held up behind large values. A frame whose bytes
// stop coming for frameStall (10 s) is dropped, so a stalled peer does
// not keep its share. The most the server holds in frames is
// MaxInflight, plus one MaxFrame, plus 16 KiB per connection.

const (
	// DefaultMaxInflight is a Server's budget for the request frames it
	// reads at once, unless set: four frames of DefaultMaxFrame.
	DefaultMaxInflight = 4 * DefaultMaxFrame
	// firstChunk is the first allocation of a frame's payload.
	firstChunk = 16 << 10
	// budgetWait bounds the wait of a frame for room in the budget.
	budgetWait = 10 * time.Second
	// frameStall bounds the wait for the next bytes of a frame.
	frameStall = 10 * time.Second
)

// errOverBudget is the error of a frame that found no room in the budget.
var errOverBudget = errors.New("the server's budget for request frames stayed full")

// budget counts the bytes of the frames being read, against a limit.
// The oldest frame may always grow, so frames that each hold part of the
// budget and wait for more cannot stall each other: it finishes, or its
// peer stalls and it is dropped, and the next oldest goes on. So the most
// it lets frames hold is limit plus one frame, plus the first chunks.
type budget struct {
	limit int64
	wait  time.Duration   // how long a growth may wait for room
	done  <-chan struct{} // closed when the server closes

	mu         sync.Mutex
	used, peak int64
	frames     list.List     // *charge, oldest first
	freed      chan struct{} // closed and replaced when bytes are released
}

// charge is what one frame holds of the budget.
type charge struct {
	b    *budget
	elem *list.Element
	held int64
}

func newBudget(limit int64, done <-chan struct{}) *budget {
	return &budget{limit: limit, wait: budgetWait, done: done, freed: make(chan struct{})}
}

// open starts a frame, charging its first chunk without waiting.
func (b *budget) open(first int64) *charge {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := &charge{b: b, held: first}
	c.elem = b.frames.PushBack(c)
	b.addLocked(first)
	return c
}

func (b *budget) addLocked(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// grow charges n more bytes to c once they fit under the limit or c is
// the oldest frame, waiting up to b.wait.
func (c *charge) grow(n int64) error {
	b := c.b
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.limit || b.frames.Front() == c.elem {
			b.addLocked(n)
			c.held += n
			b.mu.Unlock()
			return nil
		}
		freed, used := b.freed, b.used
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(b.wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-freed:
		case <-b.done:
			return ErrClosed
		case <-timeout:
			return fmt.Errorf("%w: %d bytes in flight, %d more wanted, MaxInflight is %d; waited %v", errOverBudget, used, n,
				b.limit, b.wait)
		}
	}
}

// close releases what c holds. It is idempotent.
func (c *charge) close() {
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.elem == nil {
		return
	}
	b.frames.Remove(c.elem)
	c.elem = nil
	b.used -= c.held
	c.held = 0
	close(b.freed)
	b.freed = make(chan struct{})
}

func (b *budget) stats() (used, peak int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}

// readFrame reads an n-byte payload from r as it arrives: the buffer
// starts at firstChunk bytes and doubles as it fills. grow is called
// before each growth with the bytes the buffer gains; an error from it
// ends the read.
func readFrame(r io.Reader, n int, grow func(delta int) error) ([]byte, error) {
	p := make([]byte, min(n, firstChunk))
	got := 0
	for got < n {
		if got == len(p) {
			next := min(2*len(p), n)
			if err := grow(next - len(p)); err != nil {
				return nil, err
			}
			q := make([]byte, next)
			copy(q, p[:got])
			p = q
		}
		k, err := r.Read(p[got:])
		got += k
		if err != nil && got < n {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return p, nil
}

// unlimited is readFrame's grow for a reader without a budget.
func unlimited(int) error { return nil }

// stallReader reads from r, giving each read frameStall to bring bytes.
type stallReader struct {
	conn net.Conn
	r    io.Reader
}

func (s stallReader) Read(p []byte) (int, error) {
	s.conn.SetReadDeadline(time.Now().Add(frameStall))
	return s.r.Read(p)
}
