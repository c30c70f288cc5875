package tcp

import (
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
