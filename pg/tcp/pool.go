package tcp

import (
	"io"
	"math/bits"
	"sync"
	"unsafe"
)

// pool recycles the buffers frames are received into when no destination
// was posted for them, so the hot path allocates nothing. Buffers come in
// power-of-two classes and are 8-byte aligned, so any dtype can view them.
type pool struct {
	mu   sync.Mutex
	free [64][][]byte
}

const (
	minClass   = 6        // 64 bytes
	keepPerCls = 64 << 20 // bytes of free buffers kept per class
	growFrom   = 64 << 10 // readFull's first buffer when the pool has none of the size
)

func class(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of length n. Zero-length buffers are nil.
func (p *pool) get(n int) []byte {
	if n == 0 {
		return nil
	}
	c := class(n)
	p.mu.Lock()
	if l := len(p.free[c]); l > 0 {
		b := p.free[c][l-1]
		p.free[c][l-1] = nil
		p.free[c] = p.free[c][:l-1]
		p.mu.Unlock()
		return b[:n]
	}
	p.mu.Unlock()
	words := make([]uint64, 1<<c/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), 1<<c)
	return b[:n]
}

// spare returns a free buffer of length n, or nil if the pool has none
// of its class.
func (p *pool) spare(n int) []byte {
	c := class(n)
	p.mu.Lock()
	defer p.mu.Unlock()
	l := len(p.free[c])
	if l == 0 {
		return nil
	}
	b := p.free[c][l-1]
	p.free[c][l-1] = nil
	p.free[c] = p.free[c][:l-1]
	return b[:n]
}

// readFull reads n bytes from r into a buffer of the pool. The length
// comes from a peer's frame header, so unless the pool has a buffer of
// the size to spare, the buffer starts at growFrom bytes and doubles as
// it fills: a peer that announces a large frame and sends little costs
// what it sent, not what it announced.
func (p *pool) readFull(r io.Reader, n int) ([]byte, error) {
	if n == 0 {
		return nil, nil
	}
	if b := p.spare(n); b != nil {
		if _, err := io.ReadFull(r, b); err != nil {
			p.put(b)
			return nil, err
		}
		return b, nil
	}
	b := p.get(min(n, growFrom))
	got := 0
	for {
		k, err := io.ReadFull(r, b[got:])
		got += k
		if err != nil {
			p.put(b)
			return nil, err
		}
		if got == n {
			return b, nil
		}
		next := p.get(min(2*len(b), n))
		copy(next, b)
		p.put(b)
		b = next
	}
}

// put returns b to the pool. b must have come from get.
func (p *pool) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	c := class(cap(b))
	if 1<<c != cap(b) {
		return // not one of ours
	}
	p.mu.Lock()
	if (len(p.free[c])+1)<<c <= keepPerCls || len(p.free[c]) < 2 {
		p.free[c] = append(p.free[c], b[:cap(b)])
	}
	p.mu.Unlock()
}
