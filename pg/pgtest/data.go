package pgtest

import (
	"encoding/binary"
	"math"
	"math/rand/v2"

	"github.com/goddp/ddp/pg"
)

// Note [Well-conditioned inputs]
//
// The float inputs are chosen so that any summation order gives nearly the
// same answer, and the tolerance only has to absorb rounding, not
// cancellation: SUM, AVG and PREMUL_SUM add positive values 1 + k/16,
// PRODUCT multiplies values within 25% of 1, and MIN and MAX, which are
// exact, see signed values. All of these are exact in every float dtype,
// so every backend starts from the same numbers. Integer inputs span the
// whole type (wrapping SUM and PRODUCT are exact in any order), except
// for AVG, whose sum must not overflow for the truncating division to
// mean the same thing in every backend.

// input returns rank r's contribution of length elements to a reduction
// with op in a world of n ranks. seed varies it between calls.
func input(d pg.Dtype, op pg.ReduceOp, n, r, length int, seed uint64) pg.Tensor {
	rng := rand.New(rand.NewPCG(seed, uint64(r)))
	t := pg.NewTensor(d, length)
	switch d {
	case pg.Int32:
		fillInts(pg.View[int32](t), rng, op.Kind, math.MinInt32, math.MaxInt32, n)
	case pg.Int64:
		fillInts(pg.View[int64](t), rng, op.Kind, math.MinInt64, math.MaxInt64, n)
	case pg.Uint8:
		fillInts(t.Data, rng, op.Kind, 0, math.MaxUint8, n)
	default:
		xs := make([]float64, length)
		for i := range xs {
			xs[i] = floatInput(rng, op.Kind)
		}
		setFloats(t, xs)
	}
	return t
}

func floatInput(rng *rand.Rand, k pg.ReduceKind) float64 {
	switch k {
	case pg.Product:
		return 1 + float64(rng.IntN(17)-8)/32
	case pg.Min, pg.Max:
		return float64(rng.IntN(128)-64) / 4
	}
	return 1 + float64(rng.IntN(16))/16
}

// fillInts fills s with values in [lo, hi], or for AVG in [lo/n, hi/n].
func fillInts[T int32 | int64 | uint8](s []T, rng *rand.Rand, k pg.ReduceKind, lo, hi int64, n int) {
	if k == pg.Avg {
		lo, hi = lo/int64(n), hi/int64(n)
	}
	span := uint64(hi - lo) // hi-lo overflows int64 for Int64; the bits are right
	for i := range s {
		var u uint64
		if span == math.MaxUint64 {
			u = rng.Uint64()
		} else {
			u = rng.Uint64N(span + 1)
		}
		s[i] = T(lo + int64(u))
	}
}

// randomBytes returns a tensor of length elements of arbitrary bits, for
// collectives that only move data.
func randomBytes(d pg.Dtype, length int, seed, stream uint64) pg.Tensor {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	binary.LittleEndian.PutUint64(key[8:], stream)
	t := pg.NewTensor(d, length)
	_, _ = rand.NewChaCha8(key).Read(t.Data) // never fails
	return t
}

// clone returns a copy of t with its own memory.
func clone(t pg.Tensor) pg.Tensor {
	c := pg.NewTensor(t.Dtype, t.Len())
	copy(c.Data, t.Data)
	return c
}

// randomSplits returns the split sizes of an uneven alltoall on n ranks:
// splits[i][j] elements go from rank i to rank j, each at most maxLen, a
// third of them zero. They derive from seed alone, so every rank sees the
// same matrix. Depending on seed, one rank also sends nothing, one
// receives nothing, or no rank sends to itself.
func randomSplits(n, maxLen int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	s := make([][]int, n)
	for i := range s {
		s[i] = make([]int, n)
		for j := range s[i] {
			if rng.IntN(3) != 0 {
				s[i][j] = 1 + rng.IntN(maxLen)
			}
		}
	}
	k := int(seed % uint64(n))
	for i := range n {
		switch seed % 3 {
		case 0:
			s[k][i] = 0
		case 1:
			s[i][k] = 0
		default:
			s[i][i] = 0
		}
	}
	return s
}

// splitsSumming is randomSplits with every rank sending total elements in
// all, at least one of its chunks empty when n > 1.
func splitsSumming(n, total int, seed uint64) [][]int {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	s := make([][]int, n)
	for i := range s {
		weights := make([]int, n)
		sum := 0
		for j := range weights {
			weights[j] = rng.IntN(4)
			sum += weights[j]
		}
		if n > 1 {
			sum -= weights[(i+1)%n]
			weights[(i+1)%n] = 0
		}
		if sum == 0 {
			weights[i], sum = 1, 1
		}
		s[i] = make([]int, n)
		left, last := total, 0
		for j, wt := range weights {
			s[i][j] = total * wt / sum
			left -= s[i][j]
			if wt > 0 {
				last = j
			}
		}
		s[i][last] += left
	}
	return s
}

// column returns splits[i][j] for every i: what rank j receives from
// each rank.
func columnOf(splits [][]int, j int) []int {
	c := make([]int, len(splits))
	for i, row := range splits {
		c[i] = row[j]
	}
	return c
}

// sum adds up s.
func sum(s []int) int {
	t := 0
	for _, v := range s {
		t += v
	}
	return t
}

// newRand is the suite's seeded RNG.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }
