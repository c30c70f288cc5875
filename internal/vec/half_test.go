package vec_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/internal/vec"
	"github.com/goddp/ddp/pg/backend"
)

// The conversions must give pg's scalar conversions' bits (torch's
// rounding and NaN rules) for every input. Halves are checked
// exhaustively; float32 inputs by random bit patterns, which cover NaNs,
// infinities and subnormals, plus values at and around every rounding
// boundary of the half formats.

func TestHalfConversionsMatchScalar(t *testing.T) {
	if !vec.UseF16C {
		t.Log("no F16C/AVX2 on this machine: the conversions run their scalar loops")
	}
	// Every half, in an order that mixes NaN groups with clean ones.
	halves := make([]uint16, 1<<16)
	for i := range halves {
		halves[i] = uint16(i)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(halves), func(i, j int) { halves[i], halves[j] = halves[j], halves[i] })
	// And a long NaN-free run, so that the vector path carries whole slices.
	for i := range 4096 {
		halves = append(halves, uint16(i)&0x3fff)
	}
	for _, off := range []int{0, 1, 5} {
		src := halves[off:]
		got := make([]float32, len(src))
		vec.F16ToF32(got, src, backend.F16ToF32)
		for i, h := range src {
			if w := backend.F16ToF32(h); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Fatalf("F16ToF32(%#04x) = %#08x, want %#08x", h, math.Float32bits(got[i]), math.Float32bits(w))
			}
		}
		vec.BF16ToF32(got, src)
		for i, h := range src {
			if w := backend.BF16ToF32(h); math.Float32bits(got[i]) != math.Float32bits(w) {
				t.Fatalf("BF16ToF32(%#04x) = %#08x, want %#08x", h, math.Float32bits(got[i]), math.Float32bits(w))
			}
		}
	}

	floats := make([]float32, 0, 1<<20)
	for range 1 << 19 {
		floats = append(floats, math.Float32frombits(rng.Uint32()))
	}
	// Around the half formats' rounding boundaries: each half's value and
	// the midpoints to its neighbours, a float32 ulp either side.
	for i := range 1 << 16 {
		w := float32(backend.F16ToF32(uint16(i)))
		b := math.Float32bits(w)
		for _, d := range []int32{-1, 0, 1, 1 << 12, 1<<12 - 1, 1<<12 + 1} {
			floats = append(floats, math.Float32frombits(uint32(int32(b)+d)))
		}
		bb := uint32(i) << 16
		for _, d := range []int32{-1, 0, 1, 1 << 15, 1<<15 - 1, 1<<15 + 1} {
			floats = append(floats, math.Float32frombits(uint32(int32(bb)+d)))
		}
	}
	// A long NaN-free run of gradients' magnitudes.
	for range 4096 {
		floats = append(floats, float32(rng.NormFloat64()*1e-3))
	}
	for _, off := range []int{0, 3} {
		src := floats[off:]
		got := make([]uint16, len(src))
		vec.F32ToF16(got, src, backend.F32ToF16)
		for i, f := range src {
			if w := backend.F32ToF16(f); got[i] != w {
				t.Fatalf("F32ToF16(%#08x) = %#04x, want %#04x", math.Float32bits(f), got[i], w)
			}
		}
		vec.F32ToBF16(got, src, backend.F32ToBF16)
		for i, f := range src {
			if w := backend.F32ToBF16(f); got[i] != w {
				t.Fatalf("F32ToBF16(%#08x) = %#04x, want %#04x", math.Float32bits(f), got[i], w)
			}
		}
	}
}

func BenchmarkHalf(b *testing.B) {
	const n = 932362 // the ddpstep MLP's gradient
	f := make([]float32, n)
	h := make([]uint16, n)
	for i := range f {
		f[i] = float32(i%1000) * 1e-4
	}
	b.Run("F32ToF16/kernel", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			vec.F32ToF16(h, f, backend.F32ToF16)
		}
	})
	b.Run("F32ToF16/loop", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			for i, v := range f {
				h[i] = backend.F32ToF16(v)
			}
		}
	})
	b.Run("F16ToF32/kernel", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			vec.F16ToF32(f, h, backend.F16ToF32)
		}
	})
	b.Run("F16ToF32/loop", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			for i, v := range h {
				f[i] = backend.F16ToF32(v)
			}
		}
	})
	b.Run("F32ToBF16/kernel", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			vec.F32ToBF16(h, f, backend.F32ToBF16)
		}
	})
	b.Run("F32ToBF16/loop", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			for i, v := range f {
				h[i] = backend.F32ToBF16(v)
			}
		}
	})
}
