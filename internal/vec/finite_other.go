//go:build !amd64

package vec

func finiteF32AVX(s *float32, n int) bool { panic("vec: no vector body") }
func finiteF64AVX(s *float64, n int) bool { panic("vec: no vector body") }
