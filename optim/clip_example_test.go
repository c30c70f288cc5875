package optim_test

import (
	"fmt"
	"math"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// Two gradients, [3] and [4], have a total 2-norm of 5. Clipping them to
// norm 1 scales both by 1/(5+1e-6), as torch's clip_grad_norm_ does. With
// DDP the gradients are StepTensors' after RunAll, and the optimizer
// steps on the clipped ones.
func ExampleClipGradNorm() {
	g1, g2 := []float64{3}, []float64{4}
	grads := []pg.Tensor{pg.Float64s(g1), pg.Float64s(g2)}

	total, err := optim.ClipGradNorm(grads, 1, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("total norm %v, clipped to %.8f %.8f\n", total, g1, g2)

	overflowed := []pg.Tensor{pg.Float32s([]float32{1, float32(math.Inf(1))})}
	_, err = optim.ClipNorm{MaxNorm: 1, ErrorIfNonfinite: true}.Clip(overflowed)
	fmt.Println(err)
	// Output:
	// total norm 5, clipped to [0.59999988] [0.79999984]
	// optim: the total norm of the gradients is not finite: the 2-norm is +Inf; the gradients were left as they are (a loss that overflowed, or a NaN in the data?)
}

// clip_grad_value_ clamps every value to [-v, v].
func ExampleClipGradValue() {
	g := []float32{-3, 0.25, 2}
	if err := optim.ClipGradValue([]pg.Tensor{pg.Float32s(g)}, 1); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g)
	// Output:
	// [-1 0.25 1]
}
