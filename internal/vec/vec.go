package vec

import "math"

// The exported kernels check their arguments, run the vector body on the
// longest prefix whose length is a multiple of the body's stride, and
// finish the tail with the scalar loop.

const (
	stride32 = 32 // float32 elements per vector iteration: four 8-lane registers
	stride64 = 16 // float64 elements per vector iteration: four 4-lane registers
)

func checkLen(a, b int) {
	if a != b {
		panic("vec: slices of different lengths")
	}
}

// AddF32 sets dst[i] += src[i].
func AddF32(dst, src []float32) {
	checkLen(len(dst), len(src))
	n := 0
	if useAVX && len(dst) >= stride32 {
		n = len(dst) / stride32 * stride32
		addF32AVX(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// AddF64 sets dst[i] += src[i].
func AddF64(dst, src []float64) {
	checkLen(len(dst), len(src))
	n := 0
	if useAVX && len(dst) >= stride64 {
		n = len(dst) / stride64 * stride64
		addF64AVX(&dst[0], &src[0], n)
	}
	for i := n; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

// Sum3F32 sets a[i] = ((a[i] + x[i]) + y[i]) + z[i].
func Sum3F32(a, x, y, z []float32) {
	checkLen(len(a), len(x))
	checkLen(len(a), len(y))
	checkLen(len(a), len(z))
	n := 0
	if useAVX && len(a) >= stride32 {
		n = len(a) / stride32 * stride32
		sum3F32AVX(&a[0], &x[0], &y[0], &z[0], n)
	}
	for i := n; i < len(a); i++ {
		a[i] = a[i] + x[i] + y[i] + z[i]
	}
}

// Sum3F64 sets a[i] = ((a[i] + x[i]) + y[i]) + z[i].
func Sum3F64(a, x, y, z []float64) {
	checkLen(len(a), len(x))
	checkLen(len(a), len(y))
	checkLen(len(a), len(z))
	n := 0
	if useAVX && len(a) >= stride64 {
		n = len(a) / stride64 * stride64
		sum3F64AVX(&a[0], &x[0], &y[0], &z[0], n)
	}
	for i := n; i < len(a); i++ {
		a[i] = a[i] + x[i] + y[i] + z[i]
	}
}

// ScaleF32 sets s[i] *= f.
func ScaleF32(s []float32, f float32) {
	n := 0
	if useAVX && len(s) >= stride32 {
		n = len(s) / stride32 * stride32
		mulF32AVX(&s[0], f, n)
	}
	for i := n; i < len(s); i++ {
		s[i] *= f
	}
}

// ScaleF64 sets s[i] *= f.
func ScaleF64(s []float64, f float64) {
	n := 0
	if useAVX && len(s) >= stride64 {
		n = len(s) / stride64 * stride64
		mulF64AVX(&s[0], f, n)
	}
	for i := n; i < len(s); i++ {
		s[i] *= f
	}
}

// DivF32 sets s[i] /= d: true division, not multiplication by 1/d, which
// rounds differently unless d is a power of two.
func DivF32(s []float32, d float32) {
	n := 0
	if useAVX && len(s) >= stride32 {
		n = len(s) / stride32 * stride32
		divF32AVX(&s[0], d, n)
	}
	for i := n; i < len(s); i++ {
		s[i] /= d
	}
}

// DivF64 sets s[i] /= d.
func DivF64(s []float64, d float64) {
	n := 0
	if useAVX && len(s) >= stride64 {
		n = len(s) / stride64 * stride64
		divF64AVX(&s[0], d, n)
	}
	for i := n; i < len(s); i++ {
		s[i] /= d
	}
}

// bf16Bits is the float32 whose top half is the bfloat16 h.
func bf16Bits(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
