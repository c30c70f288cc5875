package pgtest

import (
	"errors"
	"math"
	"math/big"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

func TestReduceKnownAnswers(t *testing.T) {
	i32 := func(v ...int32) pg.Tensor { return pg.Int32s(v) }
	f64 := func(v ...float64) pg.Tensor { return pg.Float64s(v) }
	u8 := func(v ...uint8) pg.Tensor { return pg.Uint8s(v) }
	for _, c := range []struct {
		name string
		ins  []pg.Tensor
		op   pg.ReduceOp
		want pg.Tensor
	}{
		{"int32 SUM wraps", []pg.Tensor{i32(math.MaxInt32, 1), i32(1, 2)}, pg.Op(pg.Sum), i32(math.MinInt32, 3)},
		{"int32 AVG truncates", []pg.Tensor{i32(7, -7), i32(0, 0)}, pg.Op(pg.Avg), i32(3, -3)},
		{"uint8 PRODUCT wraps", []pg.Tensor{u8(16, 3), u8(16, 5)}, pg.Op(pg.Product), u8(0, 15)},
		{"uint8 BXOR", []pg.Tensor{u8(0b1100), u8(0b1010), u8(1)}, pg.Op(pg.Bxor), u8(0b0111)},
		{"int32 BAND", []pg.Tensor{i32(-1, 6), i32(5, 3)}, pg.Op(pg.Band), i32(5, 2)},
		{"float64 MIN", []pg.Tensor{f64(1, -2), f64(-1, 3)}, pg.Op(pg.Min), f64(-1, -2)},
		{"float64 AVG", []pg.Tensor{f64(1, 2), f64(2, 4), f64(3, 9)}, pg.Op(pg.Avg), f64(2, 5)},
		{"float64 PREMUL_SUM", []pg.Tensor{f64(1), f64(3)}, pg.PremulSumOp(0.5), f64(2)},
		{"float64 PRODUCT", []pg.Tensor{f64(1.5), f64(-2)}, pg.Op(pg.Product), f64(-3)},
		{"float16 SUM", []pg.Tensor{half(1, 2), half(0.5, 2)}, pg.Op(pg.Sum), half(1.5, 4)},
	} {
		got, err := Reduce(c.ins, c.op)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if err := Compare(got, c.want, 0); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func half(vs ...float32) pg.Tensor {
	h := make([]uint16, len(vs))
	for i, v := range vs {
		h[i] = kernel.F32ToF16(v)
	}
	return pg.Float16s(h)
}

func TestReduceRefusesBadInputs(t *testing.T) {
	f32 := func(n int) pg.Tensor { return pg.NewTensor(pg.Float32, n) }
	for name, ins := range map[string][]pg.Tensor{
		"none":             nil,
		"lengths differ":   {f32(2), f32(3)},
		"dtypes differ":    {f32(2), pg.NewTensor(pg.Int32, 2)},
		"ragged":           {{Dtype: pg.Float32, Data: make([]byte, 3)}},
		"BAND on float32s": {f32(2), f32(2)},
	} {
		op := pg.Op(pg.Sum)
		if name == "BAND on float32s" {
			op = pg.Op(pg.Band)
		}
		if _, err := Reduce(ins, op); !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want pg.ErrInvalidArgument", name, err)
		}
	}
}

func TestCompare(t *testing.T) {
	f32 := func(v ...float32) pg.Tensor { return pg.Float32s(v) }
	nan := float32(math.NaN())
	for _, c := range []struct {
		name      string
		got, want pg.Tensor
		tol       float64
		ok        bool
	}{
		{"equal", f32(1, 2), f32(1, 2), 0, true},
		{"within tolerance", f32(1.001), f32(1), 1e-2, true},
		{"outside tolerance", f32(1.1), f32(1), 1e-2, false},
		{"bitwise", f32(1.001), f32(1), 0, false},
		{"NaN matches NaN", f32(nan), f32(nan), 1e-2, true},
		{"NaN is not a number", f32(nan), f32(1), 1e-2, false},
		{"length", f32(1), f32(1, 2), 1e-2, false},
		{"integers are bitwise", pg.Int32s([]int32{2}), pg.Int32s([]int32{3}), 0.5, false},
	} {
		if err := Compare(c.got, c.want, c.tol); (err == nil) != c.ok {
			t.Errorf("%s: got %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestToleranceFollowsTheBriefAndTheBound(t *testing.T) {
	for _, c := range []struct {
		d    pg.Dtype
		n    int
		want float64
	}{
		{pg.Float16, 8, 1e-2}, {pg.BFloat16, 1, 3 * 0x1p-8}, {pg.BFloat16, 8, 10 * 0x1p-8},
		{pg.Float32, 8, 1e-5}, {pg.Float64, 4, 1e-12}, {pg.Int32, 4, 0},
	} {
		if got := Tolerance(c.d, c.n); got != c.want {
			t.Errorf("Tolerance(%v, %d) = %g, want %g", c.d, c.n, got, c.want)
		}
	}
}

// TestInputsAreExactAndDoNotOverflow checks Note [Well-conditioned
// inputs]: float inputs are the same numbers in every dtype, and the sums
// of AVG's integer inputs fit the type.
func TestInputsAreExactAndDoNotOverflow(t *testing.T) {
	for _, n := range []int{1, 3, 8} {
		for _, k := range kinds() {
			for _, d := range pg.Dtypes() {
				if !validOp(d, k) {
					continue
				}
				checkInputs(t, d, opOf(k), n)
			}
		}
	}
}

func checkInputs(t *testing.T, d pg.Dtype, op pg.ReduceOp, n int) {
	const length = 500
	sums := make([]*big.Int, length)
	for i := range sums {
		sums[i] = new(big.Int)
	}
	for r := range n {
		in := input(d, op, n, r, length, 1)
		if d.IsFloat() {
			ref := input(pg.Float64, op, n, r, length, 1)
			if err := Compare(in, cast(ref, d), 0); err != nil || Compare(ref, cast(in, pg.Float64), 0) != nil {
				t.Fatalf("%v %v: inputs are not exact: %v", d, op, err)
			}
			continue
		}
		for i := range length {
			sums[i].Add(sums[i], big.NewInt(intAt(in, i)))
		}
	}
	if op.Kind != pg.Avg || d.IsFloat() {
		return
	}
	lo, hi := intRange(d)
	for i, s := range sums {
		if s.Cmp(big.NewInt(lo)) < 0 || s.Cmp(big.NewInt(hi)) > 0 {
			t.Fatalf("%v AVG, %d ranks: the sum %v of element %d overflows", d, n, s, i)
		}
	}
}

// cast converts a float tensor to another float dtype through float64.
func cast(x pg.Tensor, d pg.Dtype) pg.Tensor {
	out := pg.NewTensor(d, x.Len())
	setFloats(out, floats(x))
	return out
}

func intAt(t pg.Tensor, i int) int64 {
	switch t.Dtype {
	case pg.Int32:
		return int64(pg.View[int32](t)[i])
	case pg.Int64:
		return pg.View[int64](t)[i]
	}
	return int64(t.Data[i])
}

func intRange(d pg.Dtype) (int64, int64) {
	switch d {
	case pg.Int32:
		return math.MinInt32, math.MaxInt32
	case pg.Int64:
		return math.MinInt64, math.MaxInt64
	}
	return 0, math.MaxUint8
}
