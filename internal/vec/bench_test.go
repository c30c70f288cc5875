package vec

import "testing"

// The benchmarks time each kernel next to the scalar loop it replaces,
// on a 3.7 MB gradient (the ddpstep MLP's), so a run reports the ratio.
const benchElems = 932362

func benchPair(b *testing.B, name string, kernel, loop func([]float32, []float32)) {
	dst, src := make([]float32, benchElems), make([]float32, benchElems)
	for i := range dst {
		dst[i], src[i] = float32(i%97)*0.25, float32(i%89)*0.5
	}
	b.Run(name+"/kernel", func(b *testing.B) {
		b.SetBytes(4 * benchElems)
		for b.Loop() {
			kernel(dst, src)
		}
	})
	b.Run(name+"/loop", func(b *testing.B) {
		b.SetBytes(4 * benchElems)
		for b.Loop() {
			loop(dst, src)
		}
	})
}

func BenchmarkF32(b *testing.B) {
	benchPair(b, "Add", AddF32, add[float32])
	benchPair(b, "Sum3", func(d, s []float32) { Sum3F32(d, s, s, s) }, func(d, s []float32) { sum3(d, s, s, s) })
	benchPair(b, "Scale", func(d, _ []float32) { ScaleF32(d, 1) }, func(d, _ []float32) { scale(d, 1) })
	benchPair(b, "Div", func(d, _ []float32) { DivF32(d, 1) }, func(d, _ []float32) { div(d, 1) })
}
