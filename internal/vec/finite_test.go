package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// finiteRef is the reference: no element is ±Inf or NaN.
func finiteRef[T float32 | float64](s []T) bool {
	for _, x := range s {
		if math.IsInf(float64(x), 0) || math.IsNaN(float64(x)) {
			return false
		}
	}
	return true
}

func checkFinite[T float32 | float64](t *testing.T, name string, special []T, finite func([]T) bool) {
	rng := rand.New(rand.NewPCG(5, 6))
	var finites []T
	for _, x := range special {
		if finiteRef([]T{x}) {
			finites = append(finites, x)
		}
	}
	for _, n := range lengths {
		s := make([]T, n+3)[3:]
		for i := range s {
			s[i] = finites[rng.IntN(len(finites))]
		}
		if !finite(s) {
			t.Fatalf("%s n=%d: finite values reported non-finite", name, n)
		}
		// Every position of the first vector iterations and the tail, a
		// sample of those between, with each non-finite special.
		for k := 0; k < n; k++ {
			for _, bad := range special {
				if finiteRef([]T{bad}) {
					continue
				}
				keep := s[k]
				s[k] = bad
				if finite(s) {
					t.Fatalf("%s n=%d: %v at %d not found", name, n, bad, k)
				}
				s[k] = keep
			}
			if k > 130 && k < n-130 {
				k += rng.IntN(97)
			}
		}
	}
}

func TestFiniteMatchesReference(t *testing.T) {
	checkFinite(t, "FiniteF32", special32, FiniteF32)
	checkFinite(t, "FiniteF64", special64, FiniteF64)
}
