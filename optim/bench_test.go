package optim_test

import (
	"testing"

	"github.com/goddp/ddp/optim"
	"github.com/goddp/ddp/pg"
)

// BenchmarkStep times one optimizer step over ddp-train's default MLP's
// parameters (784-128-128-10, float32: 118282 values in 6 tensors).
func BenchmarkStep(b *testing.B) {
	sizes := []int{784 * 128, 128, 128 * 128, 128, 128 * 10, 10}
	for _, name := range []string{"sgd", "momentum", "adam", "adamw"} {
		b.Run(name, func(b *testing.B) {
			opt, err := optim.New(name, 1e-3, len(sizes))
			if err != nil {
				b.Fatal(err)
			}
			params, grads := make([]pg.Tensor, len(sizes)), make([]pg.Tensor, len(sizes))
			for i, n := range sizes {
				params[i], grads[i] = pg.NewTensor(pg.Float32, n), pg.NewTensor(pg.Float32, n)
				g := pg.View[float32](grads[i])
				for k := range g {
					g[k] = float32(k%17-8) * 1e-3
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := opt.Step(params, grads); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
