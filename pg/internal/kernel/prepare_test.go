package kernel

import (
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestBaseKind(t *testing.T) {
	for k, want := range map[pg.ReduceKind]pg.ReduceKind{
		pg.Sum: pg.Sum, pg.Avg: pg.Sum, pg.PremulSum: pg.Sum, pg.Product: pg.Product,
		pg.Min: pg.Min, pg.Max: pg.Max, pg.Band: pg.Band, pg.Bor: pg.Bor, pg.Bxor: pg.Bxor,
	} {
		if got := BaseKind(pg.ReduceOp{Kind: k, Factor: 3}); got != want {
			t.Errorf("BaseKind(%v) = %v, want %v", k, got, want)
		}
	}
}

// scaledNaive multiplies every element of a float tensor by f in the
// dtype's own precision, one element at a time.
func scaledNaive(in pg.Tensor, f float64) pg.Tensor {
	out := clone(in)
	for i := range in.Len() {
		switch in.Dtype {
		case pg.Float32:
			pg.View[float32](out)[i] *= float32(f)
		case pg.Float64:
			pg.View[float64](out)[i] *= f
		case pg.Float16:
			pg.View[uint16](out)[i] = F32ToF16(F16ToF32(pg.View[uint16](in)[i]) * float32(f))
		case pg.BFloat16:
			pg.View[uint16](out)[i] = F32ToBF16(BF16ToF32(pg.View[uint16](in)[i]) * float32(f))
		}
	}
	return out
}

func TestPrepareScalesOnlyWhatItShould(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const size = 4
	for _, d := range pg.Dtypes() {
		for _, op := range []pg.ReduceOp{pg.Op(pg.Sum), pg.Op(pg.Avg), pg.PremulSumOp(0.3), pg.Op(pg.Max),
			pg.Op(pg.Product)} {
			in := randomTensor(rng, d, 1000)
			want := in
			switch {
			case op.Kind == pg.PremulSum && d.IsFloat():
				want = scaledNaive(in, 0.3)
			case op.Kind == pg.Avg && d.IsFloat():
				want = scaledNaive(in, 1.0/size)
			}
			got := clone(in)
			Prepare(got, op, size)
			if i := firstDiff(got, want); i >= 0 {
				t.Errorf("Prepare %v %v: element %d differs", d, op, i)
			}
			if firstDiff(got, in) >= 0 && !Scales(op, d) { // the backends' inputs would change
				t.Errorf("Prepare changes %v under %v, which Scales denies", d, op)
			}
		}
	}
}

func TestFinishDividesIntegerAverages(t *testing.T) {
	i32 := pg.Int32s([]int32{7, -7, 8, -1, 1 << 30})
	Finish(i32, pg.Op(pg.Avg), 2)
	if got, want := pg.View[int32](i32), []int32{3, -3, 4, 0, 1 << 29}; !equal(got, want) {
		t.Errorf("int32 AVG: got %v, want %v (truncated toward zero)", got, want)
	}
	i64 := pg.Int64s([]int64{-9, 9, 1 << 40})
	Finish(i64, pg.Op(pg.Avg), 4)
	if got, want := pg.View[int64](i64), []int64{-2, 2, 1 << 38}; !equal(got, want) {
		t.Errorf("int64 AVG: got %v, want %v", got, want)
	}
	u8 := pg.Uint8s([]uint8{255, 3})
	Finish(u8, pg.Op(pg.Avg), 3)
	if got, want := u8.Data, []uint8{85, 1}; !equal(got, want) {
		t.Errorf("uint8 AVG: got %v, want %v", got, want)
	}
	// Nothing else changes.
	for _, c := range []struct {
		t  pg.Tensor
		op pg.ReduceOp
	}{
		{pg.Int32s([]int32{7}), pg.Op(pg.Sum)},
		{pg.Float32s([]float32{7}), pg.Op(pg.Avg)},
		{pg.Float64s([]float64{7}), pg.PremulSumOp(2)},
	} {
		before := clone(c.t)
		Finish(c.t, c.op, 2)
		if firstDiff(before, c.t) >= 0 {
			t.Errorf("Finish %v %v changed the tensor", c.t.Dtype, c.op)
		}
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
