package vec

import (
	"math/rand/v2"
	"testing"
)

func TestF64ToF32MatchesConversion(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			src := fill(rng, n+off, special64)[off:]
			for i := range src { // values that round: halfway cases and float32's range edges among them
				if rng.IntN(3) == 0 {
					src[i] = float64(float32(src[i])) * (1 + 0x1p-24)
				}
			}
			got, want := make([]float32, n), make([]float32, n)
			F64ToF32(got, src)
			f64ToF32(want, src)
			if i, ok := bitsEqual(got, want); !ok {
				t.Fatalf("n=%d off=%d: element %d (%v) is %v (%#x), float32 gives %v (%#x)", n, off, i, src[i], got[i],
					bits(got[i]), want[i], bits(want[i]))
			}
		}
	}
}
