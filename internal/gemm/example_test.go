package gemm_test

import (
	"fmt"

	"github.com/goddp/ddp/internal/gemm"
)

func ExampleF32() {
	a := []float32{1, 2, 3, 4, 5, 6} // 2×3
	b := []float32{1, 0, 0, 1, 1, 1} // 3×2
	c := make([]float32, 4)          // 2×2
	gemm.F32(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
	fmt.Println(c)
	// Output: [4 5 10 11]
}
