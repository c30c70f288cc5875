//go:build !amd64

package vec

// Without a vector body every kernel runs its scalar loop.
const useAVX = false

func addF32AVX(dst, src *float32, n int)     { panic("vec: no vector body") }
func addF64AVX(dst, src *float64, n int)     { panic("vec: no vector body") }
func sum3F32AVX(a, x, y, z *float32, n int)  { panic("vec: no vector body") }
func sum3F64AVX(a, x, y, z *float64, n int)  { panic("vec: no vector body") }
func mulF32AVX(s *float32, f float32, n int) { panic("vec: no vector body") }
func mulF64AVX(s *float64, f float64, n int) { panic("vec: no vector body") }
func divF32AVX(s *float32, d float32, n int) { panic("vec: no vector body") }
func divF64AVX(s *float64, d float64, n int) { panic("vec: no vector body") }

const useF16C = false

func f32ToF16F16C(dst *uint16, src *float32, n int) int  { panic("vec: no vector body") }
func f32ToBF16AVX2(dst *uint16, src *float32, n int) int { panic("vec: no vector body") }
func f16ToF32F16C(dst *float32, src *uint16, n int) int  { panic("vec: no vector body") }
func bf16ToF32AVX2(dst *float32, src *uint16, n int)     { panic("vec: no vector body") }
