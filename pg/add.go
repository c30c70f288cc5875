package pg

import (
	"fmt"

	"github.com/goddp/ddp/internal/vec"
)

// Add sets dst[i] += src[i] for two floating-point tensors of one dtype and
// length: gradient accumulation, as torch's grad += new_grad. Float16 and
// bfloat16 elements are added in float32 and rounded to nearest even, as
// torch adds half tensors on the CPU. The result is the plain loop's, bit
// for bit, at the vector kernels' speed.
//
// It is here, below the reducer and the Gorgonia wrapper, because both
// accumulate: the reducer into its buckets, the wrapper into bucket views.
func Add(dst, src Tensor) error {
	if dst.Dtype != src.Dtype || !dst.Dtype.IsFloat() {
		return fmt.Errorf("%w: add %v into %v: want one floating-point dtype", ErrInvalidArgument, src.Dtype, dst.Dtype)
	}
	if dst.Len() != src.Len() {
		return fmt.Errorf("%w: add %d elements into %d", ErrInvalidArgument, src.Len(), dst.Len())
	}
	switch dst.Dtype {
	case Float32:
		vec.AddF32(View[float32](dst), View[float32](src))
	case Float64:
		vec.AddF64(View[float64](dst), View[float64](src))
	case Float16:
		addHalf(View[uint16](dst), View[uint16](src), F16ToF32, F32ToF16)
	case BFloat16:
		addHalf(View[uint16](dst), View[uint16](src), BF16ToF32, F32ToBF16)
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
