package kernel_test

import (
	"fmt"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/kernel"
)

// ReduceN folds three ranks' buffers and writes the sum back into all of
// them, as the in-process backend does for each rank's shard.
func ExampleReduceN() {
	a, b, c := []float32{1, 2}, []float32{10, 20}, []float32{100, 200}
	bufs := []pg.Tensor{pg.Float32s(a), pg.Float32s(b), pg.Float32s(c)}
	kernel.ReduceN(bufs, bufs, pg.Sum)
	fmt.Println(a, b, c)

	// float16 and bfloat16 are reduced in float32 and rounded once.
	h := []uint16{kernel.F32ToF16(0.1), kernel.F32ToF16(0.2)}
	sum := pg.Float16s(h[:1])
	kernel.ReduceN([]pg.Tensor{sum}, []pg.Tensor{pg.Float16s(h[:1]), pg.Float16s(h[1:])}, pg.Sum)
	fmt.Printf("%.4f\n", kernel.F16ToF32(h[0]))
	// Output:
	// [111 222] [111 222] [111 222]
	// 0.2998
}
