package backend

import (
	"fmt"

	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg"
)

// Add sets dst[i] += src[i] for two floating-point tensors of one dtype and
// length: gradient accumulation, as torch's grad += new_grad. Float16 and
// bfloat16 elements are added in float32 and rounded to nearest even, as
// torch adds half tensors on the CPU. The result is the plain loop's, bit
// for bit, at the vector kernels' speed.
//
// It is here, below the reducer and the Gorgonia wrapper, because both
// accumulate: the reducer into its buckets, the wrapper into bucket views.
func Add(dst, src pg.Tensor) error {
	if dst.Dtype != src.Dtype || !dst.Dtype.IsFloat() {
		return fmt.Errorf("%w: add %v into %v: want one floating-point dtype", pg.ErrInvalidArgument, src.Dtype, dst.Dtype)
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("%w: add %d elements into %d", pg.ErrInvalidArgument, src.Len(), dst.Len())
	}
	switch dst.Dtype {
	case pg.Float32:
		vec.AddF32(pg.View[float32](dst), pg.View[float32](src))
	case pg.Float64:
		vec.AddF64(pg.View[float64](dst), pg.View[float64](src))
	case pg.Float16:
		addHalf(pg.View[uint16](dst), pg.View[uint16](src), F16ToF32, F32ToF16)
	case pg.BFloat16:
		addHalf(pg.View[uint16](dst), pg.View[uint16](src), BF16ToF32, F32ToBF16)
	}
	return nil
}

// addHalf adds half-precision bit patterns one element at a time: each sum
// is exact in float32 before its one rounding.
func addHalf(dst, src []uint16, widen func(uint16) float32, narrow func(float32) uint16) {
	for i, v := range src {
		dst[i] = narrow(widen(dst[i]) + widen(v))
	}
}
