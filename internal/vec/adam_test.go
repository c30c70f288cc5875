package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// adamScalars are a run's typical step scalars (lr 1e-3, β 0.9, 0.999, at
// step 3) and a draw of specials, so both ordinary and extreme steps run.
func adamScalars[T float32 | float64](rng *rand.Rand, special []T) []AdamStep[T] {
	pick := func() T { return special[rng.IntN(len(special))] }
	return []AdamStep[T]{
		{W1: T(1 - 0.9), Beta2: 0.999, W2: T(1 - 0.999), BC2Sqrt: T(math.Sqrt(1 - math.Pow(0.999, 3))), Eps: 1e-8,
			NegStep: T(-(1e-3 / (1 - math.Pow(0.9, 3))))},
		{W1: pick(), Beta2: pick(), W2: pick(), BC2Sqrt: pick(), Eps: pick(), NegStep: pick()},
	}
}

func checkAdam[T float32 | float64](t *testing.T, name string, special []T, run func(p, g, m, v []T, a AdamStep[T])) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			var in [4][]T
			for i := range in {
				in[i] = fill(rng, n+off, special)[off:]
			}
			for _, a := range adamScalars(rng, special) {
				var want, got [4][]T
				for i := range in {
					want[i], got[i] = append([]T(nil), in[i]...), append([]T(nil), in[i]...)
				}
				for step := 0; step < 2; step++ { // the second step starts from the first's moments
					adam(want[0], want[1], want[2], want[3], a)
					run(got[0], got[1], got[2], got[3], a)
				}
				for i, s := range []string{"p", "g", "m", "v"} {
					if k, ok := bitsEqualOrNaN(got[i], want[i]); !ok {
						t.Fatalf("%s n=%d off=%d %+v: %s[%d] is %v (%#x), the scalar loop gives %v (%#x)", name, n, off, a,
							s, k, got[i][k], bits(got[i][k]), want[i][k], bits(want[i][k]))
					}
				}
			}
		}
	}
}

func TestAdamMatchesScalarLoop(t *testing.T) {
	if !useAVX {
		t.Log("no AVX on this machine: the kernels run their scalar loops")
	}
	checkAdam(t, "AdamF32", special32, AdamF32)
	checkAdam(t, "AdamF64", special64, AdamF64)
}

func TestAdamStaysInBounds(t *testing.T) {
	for _, n := range lengths {
		var bufs [4][]float32
		var s [4][]float32
		for i := range bufs {
			bufs[i] = make([]float32, n+64)
			for k := range bufs[i] {
				bufs[i][k] = -7
			}
			s[i] = bufs[i][32 : 32+n]
			for k := range s[i] {
				s[i][k] = 1
			}
		}
		AdamF32(s[0], s[1], s[2], s[3], AdamStep[float32]{W1: 0.5, Beta2: 0.5, W2: 0.5, BC2Sqrt: 1, Eps: 0, NegStep: -1})
		for i, b := range bufs {
			for k, x := range b {
				inside := k >= 32 && k < 32+n
				if !inside && x != -7 {
					t.Fatalf("n=%d: slice %d's element %d outside it was written: %v", n, i, k-32, x)
				}
			}
		}
		if n > 0 && (s[0][n-1] != 0 || s[2][n-1] != 1 || s[3][n-1] != 1) {
			t.Fatalf("n=%d: last element p, m, v = %v, %v, %v; want 0, 1, 1", n, s[0][n-1], s[2][n-1], s[3][n-1])
		}
	}
}

func bits[T float32 | float64](x T) uint64 {
	if f, ok := any(x).(float32); ok {
		return uint64(math.Float32bits(f))
	}
	return math.Float64bits(float64(x))
}

// bitsEqualOrNaN is bitsEqual where a NaN matches any NaN: the compiler
// may swap a commutative operation's operands in the scalar loop, which
// changes only which NaN payload an operation on two NaNs returns.
func bitsEqualOrNaN[T float32 | float64](a, b []T) (int, bool) {
	for i := range a {
		if a[i] != a[i] && b[i] != b[i] {
			continue
		}
		if _, ok := bitsEqual(a[i:i+1], b[i:i+1]); !ok {
			return i, false
		}
	}
	return 0, true
}
