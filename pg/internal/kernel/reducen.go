package kernel

import (
	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
)

// blockElems is how many elements ReduceN folds at a time: small enough
// that the block stays in L1 while every input streams through it.
const blockElems = 2048

// ReduceN folds ins element-wise with k, in rank order, and writes the
// result to every tensor in outs. All tensors have the same dtype and
// length. outs may alias ins: each block is folded into a private buffer
// before any output is written. float16 and bfloat16 accumulate in float32
// across all inputs and round once.
func ReduceN(outs, ins []pg.Tensor, k pg.ReduceKind) {
	var s Scratch
	s.ReduceN(outs, ins, k)
}

// Scratch is ReduceN's working memory, kept between calls so that a
// caller that reduces often (a shared-memory world, once per chunk)
// allocates it once: the block buffer escapes to the heap, and a 4 KiB
// allreduce would otherwise allocate 16 KiB each time. The zero value
// is ready; one goroutine at a time may use it.
type Scratch struct{ buf []byte }

// block returns the block buffers: acc and tmp of blockElems elements of
// 8 bytes at most, and half of blockElems uint16s.
func (s *Scratch) block() (acc, tmp, half []byte) {
	const a, h = blockElems * 8, blockElems * 2
	if len(s.buf) < 2*a+h {
		s.buf = make([]byte, 2*a+h)
	}
	return s.buf[:a:a], s.buf[a : 2*a : 2*a], s.buf[2*a : 2*a+h : 2*a+h]
}

// ReduceN is the package's ReduceN, working in s.
func (s *Scratch) ReduceN(outs, ins []pg.Tensor, k pg.ReduceKind) {
	if len(ins) == 0 {
		return
	}
	acc, tmp, half := s.block()
	switch ins[0].Dtype {
	case pg.Float32:
		reduceN(views[float32](outs), views[float32](ins), k, acc, combineF32, vec.Sum3F32)
	case pg.Float64:
		reduceN(views[float64](outs), views[float64](ins), k, acc, combineF64, vec.Sum3F64)
	case pg.Int32:
		reduceN(views[int32](outs), views[int32](ins), k, acc, combineInt[int32], sum3[int32])
	case pg.Int64:
		reduceN(views[int64](outs), views[int64](ins), k, acc, combineInt[int64], sum3[int64])
	case pg.Uint8:
		reduceN(views[uint8](outs), views[uint8](ins), k, acc, combineInt[uint8], sum3[uint8])
	case pg.Float16:
		reduceHalfN(views[uint16](outs), views[uint16](ins), k, codecOf(pg.Float16), acc, tmp, half)
	case pg.BFloat16:
		reduceHalfN(views[uint16](outs), views[uint16](ins), k, codecOf(pg.BFloat16), acc, tmp, half)
	}
}

func views[T any](ts []pg.Tensor) [][]T {
	out := make([][]T, len(ts))
	for i, t := range ts {
		out[i] = pg.View[T](t)
	}
	return out
}

func reduceN[T number](outs, ins [][]T, k pg.ReduceKind, scratch []byte, comb func(dst, src []T, k pg.ReduceKind),
	sum3 func(a, x, y, z []T)) {
	acc := pg.View[T](pg.Tensor{Data: scratch})[:blockElems]
	n := len(ins[0])
	for lo := 0; lo < n; lo += blockElems {
		hi := min(lo+blockElems, n)
		a := acc[:hi-lo]
		copy(a, ins[0][lo:hi])
		rest := ins[1:]
		for ; k == pg.Sum && len(rest) >= 3; rest = rest[3:] {
			sum3(a, rest[0][lo:hi], rest[1][lo:hi], rest[2][lo:hi])
		}
		for _, in := range rest {
			comb(a, in[lo:hi], k)
		}
		for _, out := range outs {
			copy(out[lo:hi], a)
		}
	}
}

func reduceHalfN(outs, ins [][]uint16, k pg.ReduceKind, c halfCodec, accB, tmpB, halfB []byte) {
	acc := pg.View[float32](pg.Tensor{Data: accB})[:blockElems]
	tmp := pg.View[float32](pg.Tensor{Data: tmpB})[:blockElems]
	half := pg.View[uint16](pg.Tensor{Data: halfB})[:blockElems]
	n := len(ins[0])
	for lo := 0; lo < n; lo += blockElems {
		hi := min(lo+blockElems, n)
		a, b := acc[:hi-lo], tmp[:hi-lo]
		c.widen(a, ins[0][lo:hi])
		for _, in := range ins[1:] {
			c.widen(b, in[lo:hi])
			combineF32(a, b, k)
		}
		h := half[:hi-lo]
		c.narrow(h, a)
		for _, out := range outs {
			copy(out[lo:hi], h)
		}
	}
}

// sum3 adds three inputs into a in one pass, in order: ((a+x)+y)+z, the
// same bits as three passes but a third of the trips through a.
func sum3[T number](a, x, y, z []T) {
	x, y, z = x[:len(a)], y[:len(a)], z[:len(a)]
	for i := range a {
		a[i] = a[i] + x[i] + y[i] + z[i]
	}
}
