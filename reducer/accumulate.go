package reducer

import "github.com/goddp/ddp/pg"

// addInto sets dst += src for float tensors of the same dtype and length.
func addInto(dst, src pg.Tensor) {
	switch dst.Dtype {
	case pg.Float32:
		add(pg.View[float32](dst), pg.View[float32](src))
	case pg.Float64:
		add(pg.View[float64](dst), pg.View[float64](src))
	}
}

func add[T float32 | float64](dst, src []T) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}
