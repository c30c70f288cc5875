package vec

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The references are the package's scalar loops (vec.go), the code each
// vector body must match bit for bit.

// special64 are the values that tell a wrong kernel from a right one:
// signed zeros, subnormals, the extremes, infinities, and NaNs with
// different payloads (whose priority in a two-NaN operation is
// observable).
var special64 = []float64{
	0, math.Copysign(0, -1), 5e-324, -5e-324, 2.2250738585072014e-308, math.MaxFloat64, -math.MaxFloat64,
	math.Inf(1), math.Inf(-1), math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff8000000000abc),
	1, -1, 3, 1.0 / 3, 1e300, 1e-300,
}

var special32 = []float32{
	0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1.1754944e-38,
	math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)),
	math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc00abc), 1, -1, 3, 1.0 / 3, 1e38, 1e-38,
}

// fill returns n values: mostly random of every magnitude, with the
// specials sprinkled in.
func fill[T float32 | float64](rng *rand.Rand, n int, special []T) []T {
	s := make([]T, n)
	for i := range s {
		if rng.IntN(4) == 0 {
			s[i] = special[rng.IntN(len(special))]
			continue
		}
		s[i] = T((rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(80)-40)))
	}
	return s
}

func bitsEqual[T float32 | float64](a, b []T) (int, bool) {
	for i := range a {
		var x, y uint64
		switch any(a[i]).(type) {
		case float32:
			x, y = uint64(math.Float32bits(float32(a[i]))), uint64(math.Float32bits(float32(b[i])))
		default:
			x, y = math.Float64bits(float64(a[i])), math.Float64bits(float64(b[i]))
		}
		if x != y {
			return i, false
		}
	}
	return 0, true
}

// lengths covers the empty slice, every tail length around both strides,
// and long slices; offsets make the slices start unaligned.
var lengths = []int{0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099, 65536 + 5}

func check[T float32 | float64](t *testing.T, name string, special []T, run, ref func(a, x, y, z []T, f T)) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range lengths {
		for _, off := range []int{0, 1, 3} {
			var in [4][]T
			for i := range in {
				in[i] = fill(rng, n+off, special)[off:]
			}
			want := append([]T(nil), in[0]...)
			got := append([]T(nil), in[0]...)
			for _, f := range []T{special[rng.IntN(len(special))], 3, 0.1} {
				ref(want, in[1], in[2], in[3], f)
				run(got, in[1], in[2], in[3], f)
				if i, ok := bitsEqual(got, want); !ok {
					t.Fatalf("%s n=%d off=%d f=%v: element %d is %v (%#x), the scalar loop gives %v", name, n, off, f, i, got[i],
						got[i], want[i])
				}
			}
		}
	}
}

func TestKernelsMatchScalarLoops(t *testing.T) {
	if !useAVX {
		t.Log("no AVX on this machine: the kernels run their scalar loops")
	}
	check(t, "AddF32", special32, func(a, x, _, _ []float32, _ float32) { AddF32(a, x) },
		func(a, x, _, _ []float32, _ float32) { add(a, x) })
	check(t, "AddF64", special64, func(a, x, _, _ []float64, _ float64) { AddF64(a, x) },
		func(a, x, _, _ []float64, _ float64) { add(a, x) })
	check(t, "Sum3F32", special32, func(a, x, y, z []float32, _ float32) { Sum3F32(a, x, y, z) },
		func(a, x, y, z []float32, _ float32) { sum3(a, x, y, z) })
	check(t, "Sum3F64", special64, func(a, x, y, z []float64, _ float64) { Sum3F64(a, x, y, z) },
		func(a, x, y, z []float64, _ float64) { sum3(a, x, y, z) })
	check(t, "ScaleF32", special32, func(a, _, _, _ []float32, f float32) { ScaleF32(a, f) },
		func(a, _, _, _ []float32, f float32) { scale(a, f) })
	check(t, "ScaleF64", special64, func(a, _, _, _ []float64, f float64) { ScaleF64(a, f) },
		func(a, _, _, _ []float64, f float64) { scale(a, f) })
	check(t, "DivF32", special32, func(a, _, _, _ []float32, f float32) { DivF32(a, f) },
		func(a, _, _, _ []float32, f float32) { div(a, f) })
	check(t, "DivF64", special64, func(a, _, _, _ []float64, f float64) { DivF64(a, f) },
		func(a, _, _, _ []float64, f float64) { div(a, f) })
}

// TestKernelsStayInBounds runs the kernels on slices cut out of a larger
// array and checks that the elements around them are untouched.
func TestKernelsStayInBounds(t *testing.T) {
	for _, n := range lengths {
		buf := make([]float32, n+64)
		src := make([]float32, n)
		for i := range buf {
			buf[i] = -7
		}
		for i := range src {
			src[i] = 1
		}
		s := buf[32 : 32+n]
		AddF32(s, src)
		Sum3F32(s, src, src, src)
		ScaleF32(s, 2)
		DivF32(s, 4)
		for i, v := range buf {
			inside := i >= 32 && i < 32+n
			if want := float32(-7); !inside && v != want {
				t.Fatalf("n=%d: element %d outside the slice was written: %v", n, i-32, v)
			}
			if want := float32(-1.5); inside && v != want {
				t.Fatalf("n=%d: element %d is %v, want %v", n, i-32, v, want)
			}
		}
	}
}

func TestDifferentLengthsPanic(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("AddF32 with slices of 3 and 2 elements did not panic")
		}
	}()
	AddF32(make([]float32, 3), make([]float32, 2))
}
