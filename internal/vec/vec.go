package vec

import "math"

// Each exported kernel checks its arguments, runs the vector body on the
// longest prefix whose length is a multiple of the body's stride, and
// finishes the tail with the scalar loop, which is also the whole kernel
// where there is no vector body.

const (
	stride32 = 32 // float32 elements per vector iteration: four 8-lane registers
	stride64 = 16 // float64 elements per vector iteration: four 4-lane registers
)

func checkLen(a, b int) {
	if a != b {
		panic("vec: slices of different lengths")
	}
}

// prefix is how many of n elements the vector body takes.
func prefix(n, stride int) int {
	if !useAVX {
		return 0
	}
	return n / stride * stride
}

// AddF32 sets dst[i] += src[i].
func AddF32(dst, src []float32) {
	checkLen(len(dst), len(src))
	n := prefix(len(dst), stride32)
	if n > 0 {
		addF32AVX(&dst[0], &src[0], n)
	}
	add(dst[n:], src[n:])
}

// AddF64 sets dst[i] += src[i].
func AddF64(dst, src []float64) {
	checkLen(len(dst), len(src))
	n := prefix(len(dst), stride64)
	if n > 0 {
		addF64AVX(&dst[0], &src[0], n)
	}
	add(dst[n:], src[n:])
}

// Sum3F32 sets a[i] = ((a[i] + x[i]) + y[i]) + z[i].
func Sum3F32(a, x, y, z []float32) {
	checkLen3(len(a), len(x), len(y), len(z))
	n := prefix(len(a), stride32)
	if n > 0 {
		sum3F32AVX(&a[0], &x[0], &y[0], &z[0], n)
	}
	sum3(a[n:], x[n:], y[n:], z[n:])
}

// Sum3F64 sets a[i] = ((a[i] + x[i]) + y[i]) + z[i].
func Sum3F64(a, x, y, z []float64) {
	checkLen3(len(a), len(x), len(y), len(z))
	n := prefix(len(a), stride64)
	if n > 0 {
		sum3F64AVX(&a[0], &x[0], &y[0], &z[0], n)
	}
	sum3(a[n:], x[n:], y[n:], z[n:])
}

// ScaleF32 sets s[i] *= f.
func ScaleF32(s []float32, f float32) {
	n := prefix(len(s), stride32)
	if n > 0 {
		mulF32AVX(&s[0], f, n)
	}
	scale(s[n:], f)
}

// ScaleF64 sets s[i] *= f.
func ScaleF64(s []float64, f float64) {
	n := prefix(len(s), stride64)
	if n > 0 {
		mulF64AVX(&s[0], f, n)
	}
	scale(s[n:], f)
}

// DivF32 sets s[i] /= d: true division, not multiplication by 1/d, which
// rounds differently unless d is a power of two.
func DivF32(s []float32, d float32) {
	n := prefix(len(s), stride32)
	if n > 0 {
		divF32AVX(&s[0], d, n)
	}
	div(s[n:], d)
}

// DivF64 sets s[i] /= d.
func DivF64(s []float64, d float64) {
	n := prefix(len(s), stride64)
	if n > 0 {
		divF64AVX(&s[0], d, n)
	}
	div(s[n:], d)
}

func checkLen3(a, x, y, z int) {
	checkLen(a, x)
	checkLen(a, y)
	checkLen(a, z)
}

// The scalar loops: the tails, and the reference the bodies must match.

func add[T float32 | float64](dst, src []T) {
	for i := range dst {
		dst[i] += src[i]
	}
}

func sum3[T float32 | float64](a, x, y, z []T) {
	for i := range a {
		a[i] = a[i] + x[i] + y[i] + z[i]
	}
}

func scale[T float32 | float64](s []T, f T) {
	for i := range s {
		s[i] *= f
	}
}

func div[T float32 | float64](s []T, d T) {
	for i := range s {
		s[i] /= d
	}
}

// bf16Bits is the float32 whose top half is the bfloat16 h.
func bf16Bits(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
