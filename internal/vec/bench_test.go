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

// BenchmarkAdam times one Adam step over the ddpstep MLP's parameters,
// the kernel next to the scalar loop.
func BenchmarkAdam(b *testing.B) {
	p, g, m, v := make([]float32, benchElems), make([]float32, benchElems), make([]float32, benchElems),
		make([]float32, benchElems)
	for i := range p {
		p[i], g[i] = float32(i%97)*0.25, float32(i%89)*0.5-20
	}
	a := AdamStep[float32]{W1: 0.1, Beta2: 0.999, W2: 0.001, BC2Sqrt: 0.05, Eps: 1e-8, NegStep: -1e-3}
	b.Run("F32/kernel", func(b *testing.B) {
		b.SetBytes(16 * benchElems)
		for b.Loop() {
			AdamF32(p, g, m, v, a)
		}
	})
	b.Run("F32/loop", func(b *testing.B) {
		b.SetBytes(16 * benchElems)
		for b.Loop() {
			adam(p, g, m, v, a)
		}
	})
}
