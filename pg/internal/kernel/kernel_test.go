package kernel

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/pg"
)

// Each kernel is checked against a naive loop that works one element at a
// time in the dtype's own arithmetic: float32 and float64 natively,
// float16 and bfloat16 widened to float32 and rounded back.

// baseKinds are the element-wise combines valid for d.
func baseKinds(d pg.Dtype) []pg.ReduceKind {
	ks := []pg.ReduceKind{pg.Sum, pg.Product, pg.Min, pg.Max}
	if !d.IsFloat() {
		ks = append(ks, pg.Band, pg.Bor, pg.Bxor)
	}
	return ks
}

// randomTensor fills a tensor with values that exercise every combine:
// random bits for integers, moderate signed values for floats (no NaNs,
// whose payloads no kernel promises).
func randomTensor(rng *rand.Rand, d pg.Dtype, n int) pg.Tensor {
	t := pg.NewTensor(d, n)
	for i := range n {
		v := (rng.Float64() - 0.5) * 8
		switch d {
		case pg.Float32:
			pg.View[float32](t)[i] = float32(v)
		case pg.Float64:
			pg.View[float64](t)[i] = v
		case pg.Float16:
			pg.View[uint16](t)[i] = F32ToF16(float32(v))
		case pg.BFloat16:
			pg.View[uint16](t)[i] = F32ToBF16(float32(v))
		default:
			for b := range d.Size() {
				t.Data[i*d.Size()+b] = byte(rng.Uint32())
			}
		}
	}
	return t
}

func naiveInt[T int32 | int64 | uint8](a, b T, k pg.ReduceKind) T {
	switch k {
	case pg.Sum:
		return a + b
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
	panic("unreachable")
}

func naiveFloat[T float32 | float64](a, b T, k pg.ReduceKind) T {
	switch k {
	case pg.Sum:
		return a + b
	case pg.Product:
		return a * b
	case pg.Min:
		return min(a, b)
	case pg.Max:
		return max(a, b)
	}
	panic("unreachable")
}

// naiveFold folds ins element by element, in order, writing to a new
// tensor. For float16 and bfloat16, roundEach rounds after every step (as
// Accumulate does) instead of once at the end (as ReduceN does).
func naiveFold(ins []pg.Tensor, k pg.ReduceKind, roundEach bool) pg.Tensor {
	d, n := ins[0].Dtype, ins[0].Len()
	out := pg.NewTensor(d, n)
	for i := range n {
		switch d {
		case pg.Int32:
			pg.View[int32](out)[i] = foldAt(ins, i, k, naiveInt[int32])
		case pg.Int64:
			pg.View[int64](out)[i] = foldAt(ins, i, k, naiveInt[int64])
		case pg.Uint8:
			out.Data[i] = foldAt(ins, i, k, naiveInt[uint8])
		case pg.Float32:
			pg.View[float32](out)[i] = foldAt(ins, i, k, naiveFloat[float32])
		case pg.Float64:
			pg.View[float64](out)[i] = foldAt(ins, i, k, naiveFloat[float64])
		case pg.Float16:
			pg.View[uint16](out)[i] = foldHalf(ins, i, k, F16ToF32, F32ToF16, roundEach)
		case pg.BFloat16:
			pg.View[uint16](out)[i] = foldHalf(ins, i, k, BF16ToF32, F32ToBF16, roundEach)
		}
	}
	return out
}

func foldAt[T int32 | int64 | uint8 | float32 | float64](ins []pg.Tensor, i int, k pg.ReduceKind,
	f func(a, b T, k pg.ReduceKind) T) T {
	acc := pg.View[T](ins[0])[i]
	for _, in := range ins[1:] {
		acc = f(acc, pg.View[T](in)[i], k)
	}
	return acc
}

func foldHalf(ins []pg.Tensor, i int, k pg.ReduceKind, widen func(uint16) float32, narrow func(float32) uint16,
	roundEach bool) uint16 {
	acc := widen(pg.View[uint16](ins[0])[i])
	for _, in := range ins[1:] {
		acc = naiveFloat(acc, widen(pg.View[uint16](in)[i]), k)
		if roundEach {
			acc = widen(narrow(acc))
		}
	}
	return narrow(acc)
}

func clone(t pg.Tensor) pg.Tensor {
	c := pg.NewTensor(t.Dtype, t.Len())
	copy(c.Data, t.Data)
	return c
}

// testLengths straddle the half block (512) and ReduceN's block (2048).
func testLengths() []int { return []int{0, 1, 511, 512, 513, 2047, 2048, 2049, 5000} }

func TestAccumulateMatchesNaiveLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, d := range pg.Dtypes() {
		for _, k := range baseKinds(d) {
			for _, n := range testLengths() {
				dst, src := randomTensor(rng, d, n), randomTensor(rng, d, n)
				want := naiveFold([]pg.Tensor{dst, src}, k, true)
				got := clone(dst)
				Accumulate(got, src, k)
				if i := firstDiff(got, want); i >= 0 {
					t.Errorf("Accumulate %v %v len=%d: element %d differs from the naive loop", d, k, n, i)
				}
				// Commutative bit for bit, as documented.
				swapped := clone(src)
				Accumulate(swapped, dst, k)
				if i := firstDiff(got, swapped); i >= 0 {
					t.Errorf("Accumulate %v %v len=%d: a⊕b and b⊕a differ at element %d", d, k, n, i)
				}
			}
		}
	}
}

func TestReduceNMatchesNaiveLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, d := range pg.Dtypes() {
		for _, k := range baseKinds(d) {
			for _, ranks := range []int{1, 2, 3, 5} {
				for _, n := range testLengths() {
					t.Run(fmt.Sprintf("%v/%v/ranks=%d/len=%d", d, k, ranks, n), func(t *testing.T) {
						checkReduceN(t, rng, d, k, ranks, n)
					})
				}
			}
		}
	}
}

func checkReduceN(t *testing.T, rng *rand.Rand, d pg.Dtype, k pg.ReduceKind, ranks, n int) {
	ins := make([]pg.Tensor, ranks)
	for i := range ins {
		ins[i] = randomTensor(rng, d, n)
	}
	want := naiveFold(ins, k, false)
	kept := make([]pg.Tensor, ranks)
	outs := make([]pg.Tensor, 2)
	for i := range ins {
		kept[i] = clone(ins[i])
	}
	for i := range outs {
		outs[i] = randomTensor(rng, d, n)
	}
	ReduceN(outs, ins, k)
	for i, out := range outs {
		if j := firstDiff(out, want); j >= 0 {
			t.Errorf("output %d: element %d differs from the naive loop", i, j)
		}
	}
	for i := range ins {
		if !bytes.Equal(ins[i].Data, kept[i].Data) {
			t.Errorf("input %d changed", i)
		}
	}
	// In place: the outputs are the inputs.
	ReduceN(ins, ins, k)
	for i, in := range ins {
		if j := firstDiff(in, want); j >= 0 {
			t.Errorf("in place, tensor %d: element %d differs from the naive loop", i, j)
		}
	}
}

func firstDiff(a, b pg.Tensor) int {
	s := a.Dtype.Size()
	for i := range a.Len() {
		if !bytes.Equal(a.Data[i*s:(i+1)*s], b.Data[i*s:(i+1)*s]) {
			return i
		}
	}
	if a.Len() != b.Len() {
		return min(a.Len(), b.Len())
	}
	return -1
}

func TestReduceNWithNoInputs(t *testing.T) {
	out := pg.Float32s([]float32{7})
	ReduceN([]pg.Tensor{out}, nil, pg.Sum)
	if pg.View[float32](out)[0] != 7 {
		t.Fatal("ReduceN with no inputs wrote its output")
	}
}
