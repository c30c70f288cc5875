package testmodel

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Float is the element type of the models' values.
type Float interface{ float32 | float64 }

// Uniform draws n values in [-scale, scale) from the stream (seed, stream).
func Uniform[T Float](n int, seed, stream uint64, scale float64) []T {
	rng := rand.New(rand.NewPCG(seed, stream))
	out := make([]T, n)
	for k := range out {
		out[k] = T(scale * (2*rng.Float64() - 1))
	}
	return out
}

// batchOf draws a deterministic batch of rows of in inputs, with class
// labels below classes; seed picks it. It draws what the root's MLP tests'
// makeBatch draws for the same widths.
func batchOf(in, classes, rows int, seed uint64) (x []float64, labels []int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	x, labels = Uniform[float64](rows*in, seed, 8, 1), make([]int, rows)
	for r := range labels {
		labels[r] = rng.IntN(classes)
	}
	return x, labels
}

// FirstBitDiff returns the first parameter and element at which a and b
// differ bitwise, or -1, -1.
func FirstBitDiff[T Float](a, b [][]T) (param, elem int) {
	for i := range a {
		if len(a[i]) != len(b[i]) {
			return i, 0
		}
		for k := range a[i] {
			if math.Float64bits(float64(a[i][k])) != math.Float64bits(float64(b[i][k])) {
				return i, k
			}
		}
	}
	return -1, -1
}

// RelErr is the worst, over parameters, of max|got-want| / max|want|.
// Parameters with no values on either side are skipped.
func RelErr[T Float](got, want [][]T) float64 {
	worst := 0.0
	for i := range want {
		if len(got[i]) != len(want[i]) {
			return math.Inf(1)
		}
		diff, scale := 0.0, 0.0
		for k := range want[i] {
			diff = max(diff, math.Abs(float64(got[i][k])-float64(want[i][k])))
			scale = max(scale, math.Abs(float64(want[i][k])))
		}
		if diff > 0 {
			worst = max(worst, diff/max(scale, math.SmallestNonzeroFloat64))
		}
	}
	return worst
}

// Short prints the first few elements of v, for messages.
func Short(v []float64) string {
	if len(v) > 4 {
		return fmt.Sprintf("%.6g…", v[:4])
	}
	return fmt.Sprintf("%.6g", v)
}
