//go:build mpi

package mpi

import (
	"runtime"
	"unsafe"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// Dtype and op codes of cgo.go.
const (
	wireF32 = 1
	wireF64 = 2
	wireI32 = 3
	wireI64 = 4
	wireU8  = 5
	wireU16 = 6
)

// moveDtype is the MPI datatype that moves d's elements unchanged.
func moveDtype(d pg.Dtype) int {
	switch d {
	case pg.Float32:
		return wireF32
	case pg.Float64:
		return wireF64
	case pg.Int32:
		return wireI32
	case pg.Int64:
		return wireI64
	case pg.Uint8:
		return wireU8
	}
	return wireU16 // Float16, BFloat16
}

func isHalf(d pg.Dtype) bool { return d == pg.Float16 || d == pg.BFloat16 }

// reduceDtype is the MPI datatype d is reduced in: float16 and bfloat16
// are widened to float32 (MPI has no 16-bit float type).
func reduceDtype(d pg.Dtype) int {
	if isHalf(d) {
		return wireF32
	}
	return moveDtype(d)
}

// mpiOp is op's MPI_Op code: AVG and PREMUL_SUM are sums of scaled inputs.
func mpiOp(op pg.ReduceOp) int {
	switch op.Kind {
	case pg.Product:
		return 1
	case pg.Min:
		return 2
	case pg.Max:
		return 3
	case pg.Band:
		return 4
	case pg.Bor:
		return 5
	case pg.Bxor:
		return 6
	}
	return 0
}

// scale is the factor floats are multiplied by before the sum, or 0.
func scale(op pg.ReduceOp, d pg.Dtype, size int) float64 {
	if !d.IsFloat() {
		return 0
	}
	switch op.Kind {
	case pg.Avg:
		return 1 / float64(size)
	case pg.PremulSum:
		return op.Factor
	}
	return 0
}

// moveIn copies t into new C memory.
func moveIn(t pg.Tensor) cbuf {
	b := newCbuf(len(t.Data))
	copy(b.bytes(), t.Data)
	return b
}

// reduceIn copies t into new C memory in its reduce dtype, scaled for
// AVG and PREMUL_SUM on floats.
func reduceIn(t pg.Tensor, op pg.ReduceOp, size int) cbuf {
	f := scale(op, t.Dtype, size)
	if isHalf(t.Dtype) {
		n := t.Len()
		b := newCbuf(4 * n)
		dst := unsafe.Slice((*float32)(b.p), n)
		widen := backend.F16ToF32
		if t.Dtype == pg.BFloat16 {
			widen = backend.BF16ToF32
		}
		for i, h := range pg.View[uint16](t) {
			v := widen(h)
			if f != 0 {
				v = float32(float64(v) * f)
			}
			dst[i] = v
		}
		return b
	}
	b := moveIn(t)
	if f == 0 {
		return b
	}
	switch t.Dtype {
	case pg.Float32:
		s := unsafe.Slice((*float32)(b.p), t.Len())
		for i, v := range s {
			s[i] = float32(float64(v) * f)
		}
	case pg.Float64:
		s := unsafe.Slice((*float64)(b.p), t.Len())
		for i, v := range s {
			s[i] = v * f
		}
	}
	return b
}

// reduceBytes is the size of n elements of d in its reduce dtype.
func reduceBytes(d pg.Dtype, n int) int {
	if isHalf(d) {
		return 4 * n
	}
	return n * d.Size()
}

// reduceOut copies the reduced elements b[first:first+t.Len()] (in the
// reduce dtype) back into t, narrowing halves and dividing integer AVG
// by size, truncating toward zero.
func reduceOut(t pg.Tensor, b cbuf, first int, op pg.ReduceOp, size int) {
	n := t.Len()
	if isHalf(t.Dtype) {
		src := unsafe.Slice((*float32)(b.p), first+n)[first:]
		narrow := backend.F32ToF16
		if t.Dtype == pg.BFloat16 {
			narrow = backend.F32ToBF16
		}
		dst := pg.View[uint16](t)
		for i, v := range src {
			dst[i] = narrow(v)
		}
		return
	}
	es := t.Dtype.Size()
	copy(t.Data, b.bytes()[first*es:(first+n)*es])
	divideInPlace(t, op, size)
}

// direct reports whether t can be handed to MPI as it is: no widening and
// no scaling on the way in (integer AVG divides in place afterwards).
func direct(t pg.Tensor, op pg.ReduceOp, size int) bool {
	return len(t.Data) > 0 && !isHalf(t.Dtype) && scale(op, t.Dtype, size) == 0
}

// pin pins t's backing array with p (runtime.Pinner), so that MPI may
// keep its address after the cgo call returns, and returns it as a cbuf
// whose free is a no-op: the Work unpins p when its requests are over.
func pin(p *runtime.Pinner, t pg.Tensor) cbuf {
	p.Pin(&t.Data[0])
	return cbuf{p: unsafe.Pointer(&t.Data[0]), n: len(t.Data), pinned: true}
}

// divideInPlace finishes integer AVG on a tensor MPI summed in place.
func divideInPlace(t pg.Tensor, op pg.ReduceOp, size int) {
	if op.Kind != pg.Avg || t.Dtype.IsFloat() {
		return
	}
	switch t.Dtype {
	case pg.Int32:
		s := pg.View[int32](t)
		for i, v := range s {
			s[i] = v / int32(size)
		}
	case pg.Int64:
		s := pg.View[int64](t)
		for i, v := range s {
			s[i] = v / int64(size)
		}
	case pg.Uint8:
		for i, v := range t.Data {
			t.Data[i] = v / uint8(size)
		}
	}
}

// overlaps reports whether a and b share memory (MPI forbids aliased
// send and receive buffers).
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	a0, b0 := uintptr(unsafe.Pointer(&a[0])), uintptr(unsafe.Pointer(&b[0]))
	return a0 < b0+uintptr(len(b)) && b0 < a0+uintptr(len(a))
}
