package reducer

import "github.com/goddp/ddp/pg"

// addInto sets dst += src for float tensors of the same dtype and length.
func addInto(dst, src pg.Tensor) {
	switch dst.Dtype {
	case pg.Float32:
		add(pg.View[float32](dst), pg.View[float32](src))
	case pg.Float64:
		add(pg.View[float64](dst), pg.View[float64](src))
	case pg.Float16:
		addHalf(pg.View[uint16](dst), pg.View[uint16](src), pg.F16ToF32, pg.F32ToF16)
	case pg.BFloat16:
		addHalf(pg.View[uint16](dst), pg.View[uint16](src), pg.BF16ToF32, pg.F32ToBF16)
	}
}

// addHalf adds half-precision bit patterns as torch adds half tensors:
// in float32, rounded back to nearest even.
func addHalf(dst, src []uint16, widen func(uint16) float32, narrow func(float32) uint16) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = narrow(widen(dst[i]) + widen(v))
	}
}

func add[T float32 | float64](dst, src []T) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}
