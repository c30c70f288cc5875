package vec

import "golang.org/x/sys/cpu"

// useAVX is fixed for the life of the process: whether this CPU and OS
// run 256-bit AVX instructions.
var useAVX = cpu.X86.HasAVX

// The vector bodies, in vec_amd64.s. n is a positive multiple of the
// stride (stride32 or stride64) and every pointer addresses at least n
// elements.

//go:noescape
func addF32AVX(dst, src *float32, n int)

//go:noescape
func addF64AVX(dst, src *float64, n int)

//go:noescape
func sum3F32AVX(a, x, y, z *float32, n int)

//go:noescape
func sum3F64AVX(a, x, y, z *float64, n int)

//go:noescape
func mulF32AVX(s *float32, f float32, n int)

//go:noescape
func mulF64AVX(s *float64, f float64, n int)

//go:noescape
func divF32AVX(s *float32, d float32, n int)

//go:noescape
func divF64AVX(s *float64, d float64, n int)

// useF16C: the CPU converts halves (F16C) and has AVX2's integer lanes,
// which the bfloat16 bodies use.
var useF16C = useAVX && cpu.X86.HasAVX2 && hasF16C()

// hasF16C reads CPUID leaf 1's F16C bit, which x/sys/cpu does not report.
func hasF16C() bool

// The conversion bodies convert groups of eight from the start, n (a
// positive multiple of eight) at most, and stop before the first group
// that holds a NaN; they return how many elements they converted.

//go:noescape
func f32ToF16F16C(dst *uint16, src *float32, n int) int

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int) int

//go:noescape
func f16ToF32F16C(dst *float32, src *uint16, n int) int

// bf16ToF32AVX2 converts all n elements: widening a bfloat16 is a shift.
//
//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)
