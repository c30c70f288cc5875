package layers

import (
	"fmt"
	"hash"
	"hash/fnv"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Note [output buffers]
//
// Gorgonia v0.9.18's tape machine clears every register in Reset, so the
// prealloc it offers UsePreallocDo is a tensor that an earlier node of the
// same run left in a register the allocator hands on (or, for ops that
// call extern, a tensor its alloc instruction makes afresh every run). It
// never carries a buffer from one step to the next. So each op here owns
// an ownBuf, allocated on the first run and written every step after: a
// node's value is valid until the next run of the machine, as the values
// of Gorgonia's own ops are until the next Reset. UsePreallocDo writes
// into the machine's tensor when it has the output's dtype and shape and
// shares no memory with an input the op reads while writing (the matrix
// products); otherwise it writes into the op's own buffer.
//
// An op value belongs to one node (Linear, ReLU and Tanh make one per
// call), so one graph must not be run by two machines at once; Gorgonia's
// nodes, which hold their values, already forbid that.

// ownBuf is an op's output tensor, made on first use and reused while
// the dtype and shape stay the same.
type ownBuf struct{ t *tensor.Dense }

// get returns the buffer for an output of dtype dt and the given shape.
func (b *ownBuf) get(dt tensor.Dtype, shape tensor.Shape) *tensor.Dense {
	if b.t == nil || b.t.Dtype() != dt || !b.t.Shape().Eq(shape) {
		b.t = tensor.New(tensor.WithShape(shape.Clone()...), tensor.Of(dt))
	}
	return b.t
}

// pick returns prealloc when it is a dense tensor of dtype dt and the
// given shape that shares no memory with any of noAlias (nil entries
// skipped), else the op's own buffer.
func (b *ownBuf) pick(prealloc gorgonia.Value, dt tensor.Dtype, shape tensor.Shape,
	noAlias inputs) *tensor.Dense {
	p, ok := prealloc.(*tensor.Dense)
	if !ok || p.Dtype() != dt || !p.Shape().Eq(shape) || !p.IsNativelyAccessible() || p.RequiresIterator() {
		return b.get(dt, shape)
	}
	for _, in := range noAlias {
		if in != nil && overlaps(p, in) {
			return b.get(dt, shape)
		}
	}
	return p
}

// overlaps reports whether a's and b's backing memory intersect.
func overlaps(a, b *tensor.Dense) bool {
	a0, b0 := a.Uintptr(), b.Uintptr()
	a1, b1 := a0+uintptr(a.MemSize()), b0+uintptr(b.MemSize())
	return a0 < b1 && b0 < a1
}

// maxArity is the most inputs an op here takes.
const maxArity = 3

// inputs are an op's inputs as dense tensors, in an array so that a step
// allocates nothing for them.
type inputs [maxArity]*tensor.Dense

// denseInputs checks that every input is a contiguous dense tensor of
// one float dtype (float32 or float64).
func denseInputs(op string, in []gorgonia.Value, arity int) (inputs, error) {
	var ds inputs
	if len(in) != arity || arity > maxArity {
		return ds, fmt.Errorf("layers: %s: %d inputs, want %d", op, len(in), arity)
	}
	for k, v := range in {
		d, ok := v.(*tensor.Dense)
		if !ok || d.RequiresIterator() || !d.IsNativelyAccessible() {
			return ds, fmt.Errorf("layers: %s: input %d is %T; want a contiguous *tensor.Dense", op, k, v)
		}
		if dt := d.Dtype(); (dt != tensor.Float32 && dt != tensor.Float64) || dt != in[0].Dtype() {
			return ds, fmt.Errorf("layers: %s: input %d is %v (input 0 %v); want float32 or float64, one dtype", op, k,
				dt, in[0].Dtype())
		}
		ds[k] = d
	}
	return ds, nil
}

// opMeta is the part of gorgonia.Op that is the same for every op here:
// pure Go, no pointers returned, no inputs overwritten, hashed by name.
type opMeta struct{ name string }

func (m opMeta) String() string        { return m.name }
func (opMeta) ReturnsPtr() bool        { return false }
func (opMeta) CallsExtern() bool       { return false }
func (opMeta) OverwritesInput() int    { return -1 }
func (m opMeta) WriteHash(h hash.Hash) { fmt.Fprint(h, m.name) }
func (m opMeta) Hashcode() uint32      { h := fnv.New32a(); m.WriteHash(h); return h.Sum32() }
