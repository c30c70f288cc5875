package vec

// The finiteness bodies, in finite_amd64.s: whether none of the first n
// elements (a positive multiple of stride32 or stride64) is an infinity or
// a NaN.

//go:noescape
func finiteF32AVX(s *float32, n int) bool

//go:noescape
func finiteF64AVX(s *float64, n int) bool
