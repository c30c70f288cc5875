package tcp

import (
	"math"

	"github.com/goddp/ddp/pg"
)

// Pipelining: a segment is cut into at least pipelineDepth chunks, so
// that sending, receiving and reducing overlap even for a modest
// segment, but no chunk is cut below minChunkBytes (or above the
// configured ChunkBytes).
const (
	pipelineDepth = 4
	minChunkBytes = 64 << 10
)

// plan cuts a tensor into parts segments, as even as whole elements
// allow, and each segment into chunks of at most chunkBytes (and, for
// depth > 1, into about depth chunks if that makes them smaller), and
// numbers the frames of a schedule of steps steps so that every
// (step, chunk) has its own tag. Every rank computes the same plan from
// the same arguments.
type plan struct {
	t      pg.Tensor
	parts  int
	ce     int // elements per chunk
	chunks int // chunks per segment (the longest one)
}

func newPlan(t pg.Tensor, parts, chunkBytes, depth, steps int) plan {
	longest := (t.Len() + parts - 1) / parts
	es := t.Dtype.Size()
	ce := max(1, chunkBytes/es)
	if d := longest / depth; d < ce {
		ce = min(ce, max(d, minChunkBytes/es))
	}
	if limit := math.MaxUint32 / max(steps, 1); (longest+ce-1)/ce > limit {
		ce = (longest + limit - 1) / limit
	}
	return plan{t: t, parts: parts, ce: ce, chunks: (longest + ce - 1) / ce}
}

// seg returns the element bounds of segment j, taken modulo parts.
func (p plan) seg(j int) (lo, hi int) {
	j = ((j % p.parts) + p.parts) % p.parts
	n := p.t.Len()
	return j * n / p.parts, (j + 1) * n / p.parts
}

// chunk returns chunk c of segment j. It may be empty: both ends of a
// link skip empty chunks.
func (p plan) chunk(j, c int) pg.Tensor {
	lo, hi := p.seg(j)
	return sub(p.t, lo, hi, c, p.ce)
}

// sub returns chunk c, of ce elements, of t's elements [lo, hi).
func sub(t pg.Tensor, lo, hi, c, ce int) pg.Tensor {
	a := min(lo+c*ce, hi)
	return t.Slice(a, min(a+ce, hi))
}

// tag numbers chunk c of step step.
func (p plan) tag(step, c int) uint32 { return uint32(step*p.chunks + c) }

// mod is i modulo n, in [0, n).
func mod(i, n int) int { return ((i % n) + n) % n }
