package bucket

import (
	"github.com/goddp/ddp/pg"
)

// Bucket is one unit of gradient communication: a flat, contiguous buffer
// holding the gradients of Params back to back, in that order.
type Bucket struct {
	Index   int       // position in launch order
	Params  []int     // parameter indices, in buffer order
	Offsets []int     // Offsets[j]: first element of Params[j] in Buffer
	Lengths []int     // Lengths[j]: element count of Params[j]
	Limit   int       // the size limit the bucket was planned against, in bytes
	Buffer  pg.Tensor // the flat buffer
}

// New lays out a bucket for params, where numel[p] is parameter p's
// element count, and allocates its buffer.
func New(index int, params []int, numel []int, dtype pg.Dtype, limit int) *Bucket {
	return NewOn(index, params, numel, dtype, limit, pg.NewTensor)
}

// NewOn is New with the buffer from alloc, which must return n zeroed
// elements of d: memory a process group hands out
// (backend.HostBufferAllocator), for instance.
func NewOn(index int, params []int, numel []int, dtype pg.Dtype, limit int,
	alloc func(d pg.Dtype, n int) pg.Tensor) *Bucket {
	b := &Bucket{Index: index, Params: params, Limit: limit}
	off := 0
	for _, p := range params {
		b.Offsets = append(b.Offsets, off)
		b.Lengths = append(b.Lengths, numel[p])
		off += numel[p]
	}
	b.Buffer = alloc(dtype, off)
	return b
}

// View returns the slice of the buffer that holds Params[j]'s gradient.
// It shares memory with the buffer.
func (b *Bucket) View(j int) pg.Tensor {
	return b.Buffer.Slice(b.Offsets[j], b.Offsets[j]+b.Lengths[j])
}

// Bytes is the size of the buffer in bytes.
func (b *Bucket) Bytes() int { return len(b.Buffer.Data) }
