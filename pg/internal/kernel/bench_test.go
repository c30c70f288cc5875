package kernel

import (
	"testing"

	"github.com/goddp/ddp/pg"
)

// BenchmarkAccumulate is the ring's inner loop: dst += src on 1 MiB of
// float32, in cache-sized chunks as the ring receives them.
func BenchmarkAccumulate(b *testing.B) {
	const n = 1 << 18
	dst, src := pg.NewTensor(pg.Float32, n), pg.NewTensor(pg.Float32, n)
	b.SetBytes(4 * n)
	for b.Loop() {
		Accumulate(dst, src, pg.Sum)
	}
}
