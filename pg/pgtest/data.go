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
