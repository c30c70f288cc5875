package vec_test

import (
	"fmt"

	"github.com/goddp/ddp/internal/vec"
)

func Example() {
	grad := []float32{2, 4, 6, 8}
	peer := []float32{1, 1, 1, 1}
	vec.AddF32(grad, peer) // sum two ranks' gradients
	vec.DivF32(grad, 2)    // average them, dividing as torch's div_ does
	fmt.Println(grad)
	// Output: [1.5 2.5 3.5 4.5]
}
