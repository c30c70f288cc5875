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
