package backend_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

func ExampleAdd() {
	grad := []float32{1, 2, 3}
	if err := backend.Add(pg.Float32s(grad), pg.Float32s([]float32{0.5, 0.5, 0.5})); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(grad)
	fmt.Println(backend.Add(pg.Float32s(grad), pg.Float64s([]float64{1, 2, 3})))
	// Output:
	// [1.5 2.5 3.5]
	// invalid argument: add float64 into float32: want one floating-point dtype
}

// TestAddMatchesPlainLoop holds Add to the loop it replaced in the reducer
// and the wrapper, for every float dtype and lengths around the vector
// width.
func TestAddMatchesPlainLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []pg.Dtype{pg.Float32, pg.Float64, pg.Float16, pg.BFloat16} {
		for _, n := range []int{0, 1, 7, 8, 9, 33} {
			dst, src := randomFloats(rng, d, n), randomFloats(rng, d, n)
			want := plainAdd(dst, src)
			if err := backend.Add(dst, src); err != nil {
				t.Fatal(err)
			}
			if string(dst.Data) != string(want.Data) {
				t.Errorf("%v, %d elements: Add differs from the plain loop", d, n)
			}
		}
	}
}

func TestAddRefuses(t *testing.T) {
	for _, c := range []struct{ dst, src pg.Tensor }{
		{pg.Float32s(make([]float32, 2)), pg.Float32s(make([]float32, 3))},
		{pg.Int32s(make([]int32, 2)), pg.Int32s(make([]int32, 2))},
		{pg.Float16s(make([]uint16, 2)), pg.BFloat16s(make([]uint16, 2))},
	} {
		if err := backend.Add(c.dst, c.src); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("Add(%v[%d], %v[%d]) = %v; want ErrInvalidArgument", c.dst.Dtype, c.dst.Len(), c.src.Dtype, c.src.Len(),
				err)
		}
	}
}

func randomFloats(rng *rand.Rand, d pg.Dtype, n int) pg.Tensor {
	f := make([]float32, n)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
	}
	t := pg.NewTensor(d, n)
	if err := backend.Convert(t, pg.Float32s(f)); err != nil {
		panic(err)
	}
	return t
}

// plainAdd is dst + src with one scalar operation per element (half
// precision through float32), on copies.
func plainAdd(dst, src pg.Tensor) pg.Tensor {
	out := pg.NewTensor(dst.Dtype, dst.Len())
	copy(out.Data, dst.Data)
	switch dst.Dtype {
	case pg.Float32:
		o, s := pg.View[float32](out), pg.View[float32](src)
		for i := range o {
			o[i] += s[i]
		}
	case pg.Float64:
		o, s := pg.View[float64](out), pg.View[float64](src)
		for i := range o {
			o[i] += s[i]
		}
	case pg.Float16:
		o, s := pg.View[uint16](out), pg.View[uint16](src)
		for i := range o {
			o[i] = backend.F32ToF16(backend.F16ToF32(o[i]) + backend.F16ToF32(s[i]))
		}
	case pg.BFloat16:
		o, s := pg.View[uint16](out), pg.View[uint16](src)
		for i := range o {
			o[i] = backend.F32ToBF16(backend.BF16ToF32(o[i]) + backend.BF16ToF32(s[i]))
		}
	}
	return out
}
