package pgtest

import (
	"bytes"
	"fmt"
	"math"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// Reduce is the serial reference for AllReduce: it reduces ins, one
// tensor per rank, element-wise with op and returns a new tensor. Integers
// are reduced with Go's wrapping arithmetic and AVG divides the sum,
// truncating toward zero; floats are reduced in float64 (AVG as sum/n,
// PREMUL_SUM as the sum of x*factor) and rounded once to the dtype. It
// shares no code with the backends' kernels.
func Reduce(ins []pg.Tensor, op pg.ReduceOp) (pg.Tensor, error) {
	if len(ins) == 0 {
		return pg.Tensor{}, fmt.Errorf("pgtest: %w: no inputs", pg.ErrInvalidArgument)
	}
	d, n := ins[0].Dtype, ins[0].Len()
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return pg.Tensor{}, fmt.Errorf("pgtest: input %d: %w", i, err)
		}
		if in.Dtype != d || in.Len() != n {
			return pg.Tensor{}, fmt.Errorf("pgtest: %w: input %d is %v x %d, input 0 is %v x %d", pg.ErrInvalidArgument, i,
				in.Dtype, in.Len(), d, n)
		}
	}
	if !validOp(d, op.Kind) {
		return pg.Tensor{}, fmt.Errorf("pgtest: %w: %v on %v", pg.ErrInvalidArgument, op, d)
	}
	out := pg.NewTensor(d, n)
	switch d {
	case pg.Int32:
		reduceInts(pg.View[int32](out), views[int32](ins), op.Kind)
	case pg.Int64:
		reduceInts(pg.View[int64](out), views[int64](ins), op.Kind)
	case pg.Uint8:
		reduceInts(out.Data, views[uint8](ins), op.Kind)
	default:
		reduceFloats(out, ins, op)
	}
	return out, nil
}

// validOp is the suite's own statement of which ops apply to which dtypes.
func validOp(d pg.Dtype, k pg.ReduceKind) bool {
	switch k {
	case pg.Sum, pg.Avg, pg.Product, pg.Min, pg.Max:
		return true
	case pg.Band, pg.Bor, pg.Bxor:
		return !d.IsFloat()
	case pg.PremulSum:
		return d.IsFloat()
	}
	return false
}

func views[T any](ts []pg.Tensor) [][]T {
	out := make([][]T, len(ts))
	for i, t := range ts {
		out[i] = pg.View[T](t)
	}
	return out
}

func reduceInts[T int32 | int64 | uint8](out []T, ins [][]T, k pg.ReduceKind) {
	for i := range out {
		acc := ins[0][i]
		for _, in := range ins[1:] {
			acc = combineInt(acc, in[i], k)
		}
		if k == pg.Avg {
			acc /= T(len(ins))
		}
		out[i] = acc
	}
}

func combineInt[T int32 | int64 | uint8](a, b T, k pg.ReduceKind) T {
	switch k {
	case pg.Product:
		return a * b
	case pg.Min:
		return min(a, b)
	case pg.Max:
		return max(a, b)
	case pg.Band:
		return a & b
	case pg.Bor:
		return a | b
	case pg.Bxor:
		return a ^ b
	}
	return a + b // SUM and AVG
}

func reduceFloats(out pg.Tensor, ins []pg.Tensor, op pg.ReduceOp) {
	xs := make([][]float64, len(ins))
	for i, in := range ins {
		xs[i] = floats(in)
	}
	res := make([]float64, out.Len())
	for i := range res {
		res[i] = reduceFloat(xs, i, op)
	}
	setFloats(out, res)
}

func reduceFloat(xs [][]float64, i int, op pg.ReduceOp) float64 {
	acc := xs[0][i]
	if op.Kind == pg.PremulSum {
		acc *= op.Factor
	}
	for _, x := range xs[1:] {
		v := x[i]
		switch op.Kind {
		case pg.Product:
			acc *= v
		case pg.Min:
			acc = min(acc, v)
		case pg.Max:
			acc = max(acc, v)
		case pg.PremulSum:
			acc += v * op.Factor
		default:
			acc += v
		}
	}
	if op.Kind == pg.Avg {
		acc /= float64(len(xs))
	}
	return acc
}

// floats decodes a floating-point tensor to float64, exactly. It returns
// nil for other dtypes.
func floats(t pg.Tensor) []float64 {
	out := make([]float64, t.Len())
	switch t.Dtype {
	case pg.Float32:
		for i, v := range pg.View[float32](t) {
			out[i] = float64(v)
		}
	case pg.Float64:
		copy(out, pg.View[float64](t))
	case pg.Float16:
		for i, v := range pg.View[uint16](t) {
			out[i] = float64(kernel.F16ToF32(v))
		}
	case pg.BFloat16:
		for i, v := range pg.View[uint16](t) {
			out[i] = float64(kernel.BF16ToF32(v))
		}
	default:
		return nil
	}
	return out
}

// setFloats rounds xs into the floating-point tensor t.
func setFloats(t pg.Tensor, xs []float64) {
	switch t.Dtype {
	case pg.Float32:
		out := pg.View[float32](t)
		for i, v := range xs {
			out[i] = float32(v)
		}
	case pg.Float64:
		copy(pg.View[float64](t), xs)
	case pg.Float16:
		out := pg.View[uint16](t)
		for i, v := range xs {
			out[i] = kernel.F32ToF16(float32(v))
		}
	case pg.BFloat16:
		out := pg.View[uint16](t)
		for i, v := range xs {
			out[i] = kernel.F32ToBF16(float32(v))
		}
	}
}

// Tolerance is the relative error the suite allows in a float result of a
// world of n ranks, for the well-conditioned inputs it uses (positive
// addends, factors near 1). An algorithm may round after every step: n-1
// combines, the scaling of AVG and PREMUL_SUM, and the final rounding, and
// the reference rounds once more; each costs at most the dtype's unit
// roundoff u, so the bound is (n+2)*u. It is never tighter than 1e-2 for
// float16 and bfloat16, 1e-5 for float32 and 1e-12 for float64. Integers
// get 0.
func Tolerance(d pg.Dtype, n int) float64 {
	steps := float64(n + 2)
	switch d {
	case pg.Float16:
		return max(1e-2, steps*0x1p-11)
	case pg.BFloat16:
		return max(1e-2, steps*0x1p-8)
	case pg.Float32:
		return max(1e-5, steps*0x1p-24)
	case pg.Float64:
		return max(1e-12, steps*0x1p-53)
	}
	return 0
}

// Compare checks got against want: bit for bit when tol is 0 or the dtype
// is an integer, else each element within relative error tol (NaN matches
// NaN). The error names the first bad element and counts the others.
func Compare(got, want pg.Tensor, tol float64) error {
	if got.Dtype != want.Dtype || got.Len() != want.Len() {
		return fmt.Errorf("got %v x %d, want %v x %d", got.Dtype, got.Len(), want.Dtype, want.Len())
	}
	if tol == 0 || !got.Dtype.IsFloat() {
		return compareBits(got, want)
	}
	g, w := floats(got), floats(want)
	bad, first := 0, -1
	for i := range g {
		if !near(g[i], w[i], tol) {
			if bad++; first < 0 {
				first = i
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d elements differ; first: element %d is %v, want %v (relative tolerance %g)", bad, len(g),
			first, g[first], w[first], tol)
	}
	return nil
}

func near(g, w, tol float64) bool {
	if g == w || math.IsNaN(g) && math.IsNaN(w) {
		return true
	}
	return math.Abs(g-w) <= tol*math.Abs(w)
}

func compareBits(got, want pg.Tensor) error {
	i := firstDiff(got, want)
	if i < 0 {
		return nil
	}
	return fmt.Errorf("element %d is %s, want %s (bitwise)", i, element(got, i), element(want, i))
}

// firstDiff is the index of the first element where a and b differ in
// their bits, or -1.
func firstDiff(a, b pg.Tensor) int {
	if bytes.Equal(a.Data, b.Data) {
		return -1
	}
	s := a.Dtype.Size()
	for i := 0; i < a.Len() && i < b.Len(); i++ {
		if !bytes.Equal(a.Data[i*s:(i+1)*s], b.Data[i*s:(i+1)*s]) {
			return i
		}
	}
	return -1
}

// element formats element i of t for a failure message.
func element(t pg.Tensor, i int) string {
	e := t.Slice(i, i+1)
	switch t.Dtype {
	case pg.Int32:
		return fmt.Sprint(pg.View[int32](e)[0])
	case pg.Int64:
		return fmt.Sprint(pg.View[int64](e)[0])
	case pg.Uint8:
		return fmt.Sprint(e.Data[0])
	case pg.Float16, pg.BFloat16:
		return fmt.Sprintf("%v (0x%04x)", floats(e)[0], pg.View[uint16](e)[0])
	}
	return fmt.Sprint(floats(e)[0])
}

// Gather is the serial reference for Gather and AllGather: the inputs,
// one per rank and all of one dtype and length, back to back in rank
// order, in a new tensor.
func Gather(ins []pg.Tensor) (pg.Tensor, error) {
	if len(ins) == 0 {
		return pg.Tensor{}, fmt.Errorf("pgtest: %w: no inputs", pg.ErrInvalidArgument)
	}
	d, n := ins[0].Dtype, ins[0].Len()
	out := pg.NewTensor(d, len(ins)*n)
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return pg.Tensor{}, fmt.Errorf("pgtest: input %d: %w", i, err)
		}
		if in.Dtype != d || in.Len() != n {
			return pg.Tensor{}, fmt.Errorf("pgtest: %w: input %d is %v x %d, input 0 is %v x %d", pg.ErrInvalidArgument, i,
				in.Dtype, in.Len(), d, n)
		}
		copy(out.Slice(i*n, (i+1)*n).Data, in.Data)
	}
	return out, nil
}

// Scatter is the serial reference for Scatter: in cut into size equal
// chunks, chunk i for rank i, each in a new tensor.
func Scatter(in pg.Tensor, size int) ([]pg.Tensor, error) {
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if size < 1 || in.Len()%size != 0 {
		return nil, fmt.Errorf("pgtest: %w: %d elements do not split into %d equal chunks", pg.ErrInvalidArgument, in.Len(),
			size)
	}
	k := in.Len() / size
	outs := make([]pg.Tensor, size)
	for i := range outs {
		outs[i] = clone(in.Slice(i*k, (i+1)*k))
	}
	return outs, nil
}

// AllToAll is the serial reference for AllToAll: splits[i][j] is the
// number of elements rank i sends to rank j (nil splits: equal chunks),
// so rank j's output is, for every i in order, chunk j of rank i's input.
// It returns each rank's output in a new tensor.
func AllToAll(ins []pg.Tensor, splits [][]int) ([]pg.Tensor, error) {
	n := len(ins)
	if n == 0 {
		return nil, fmt.Errorf("pgtest: %w: no inputs", pg.ErrInvalidArgument)
	}
	d := ins[0].Dtype
	if splits == nil {
		splits = make([][]int, n)
		for i, in := range ins {
			if in.Len()%n != 0 {
				return nil, fmt.Errorf("pgtest: %w: input %d holds %d elements, not a multiple of %d", pg.ErrInvalidArgument, i,
					in.Len(), n)
			}
			splits[i] = make([]int, n)
			for j := range splits[i] {
				splits[i][j] = in.Len() / n
			}
		}
	}
	if len(splits) != n {
		return nil, fmt.Errorf("pgtest: %w: %d rows of splits for %d ranks", pg.ErrInvalidArgument, len(splits), n)
	}
	outLens := make([]int, n)
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("pgtest: input %d: %w", i, err)
		}
		if in.Dtype != d {
			return nil, fmt.Errorf("pgtest: %w: input %d is %v, input 0 is %v", pg.ErrInvalidArgument, i, in.Dtype, d)
		}
		if len(splits[i]) != n {
			return nil, fmt.Errorf("pgtest: %w: rank %d has %d splits for %d ranks", pg.ErrInvalidArgument, i, len(splits[i]), n)
		}
		sum := 0
		for j, s := range splits[i] {
			if s < 0 {
				return nil, fmt.Errorf("pgtest: %w: rank %d sends %d elements to rank %d", pg.ErrInvalidArgument, i, s, j)
			}
			sum += s
			outLens[j] += s
		}
		if sum != in.Len() {
			return nil, fmt.Errorf("pgtest: %w: rank %d's splits sum to %d, its input holds %d", pg.ErrInvalidArgument, i, sum,
				in.Len())
		}
	}
	outs := make([]pg.Tensor, n)
	at := make([]int, n) // where the next chunk goes in each output
	for j := range outs {
		outs[j] = pg.NewTensor(d, outLens[j])
	}
	for i, in := range ins {
		from := 0
		for j, s := range splits[i] {
			copy(outs[j].Slice(at[j], at[j]+s).Data, in.Slice(from, from+s).Data)
			at[j] += s
			from += s
		}
	}
	return outs, nil
}
