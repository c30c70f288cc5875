package nccl

import (
	"math/bits"
	"sync"

	"github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg/nccl/internal/binding"
)

// buf is a staging buffer: device memory and pinned host memory of the
// same size. Host tensors travel caller -> host -> dev -> NCCL -> dev ->
// host -> caller; the device never touches Go memory.
type buf struct {
	dev  libnccl.DevicePtr
	host []byte
	size int
}

// minBuf is the smallest size class.
const minBuf = 256

// pool caches staging buffers by power-of-two size class: cuMemFree
// synchronizes the device and cuMemAllocHost is slow, so buffers are
// reused, never freed before Close.
type pool struct {
	be   binding.Backend
	mu   sync.Mutex
	free map[int][]*buf
	all  []*buf
}

func sizeClass(n int) int {
	if n <= minBuf {
		return minBuf
	}
	return 1 << bits.Len(uint(n-1))
}

// get returns a buffer of at least n bytes.
func (p *pool) get(n int) (*buf, error) {
	c := sizeClass(n)
	p.mu.Lock()
	if l := p.free[c]; len(l) > 0 {
		b := l[len(l)-1]
		p.free[c] = l[:len(l)-1]
		p.mu.Unlock()
		return b, nil
	}
	p.mu.Unlock()
	dev, err := p.be.Malloc(c)
	if err != nil {
		return nil, err
	}
	host, err := p.be.MallocHost(c)
	if err != nil {
		_ = p.be.Free(dev)
		return nil, err
	}
	b := &buf{dev: dev, host: host[:c:c], size: c}
	p.mu.Lock()
	p.all = append(p.all, b)
	p.mu.Unlock()
	return b, nil
}

// put gives buffers back.
func (p *pool) put(bs ...*buf) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.free == nil {
		p.free = map[int][]*buf{}
	}
	for _, b := range bs {
		p.free[b.size] = append(p.free[b.size], b)
	}
}

// release frees every buffer ever made, including those of failed Works;
// call it only once the stream is idle.
func (p *pool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.all {
		_ = p.be.Free(b.dev)
		_ = p.be.FreeHost(b.host)
	}
	p.all, p.free = nil, nil
}

// allocated is the number of buffers made (for tests).
func (p *pool) allocated() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.all)
}
