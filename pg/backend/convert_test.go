package backend_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// The conversions are checked exhaustively against an arithmetic
// reference by pg/internal/kernel's tests, which call them.

func TestHalfRoundTripsAndBoundaries(t *testing.T) {
	for h := range 1 << 16 {
		h := uint16(h)
		f := backend.F16ToF32(h)
		if f != f {
			if g := backend.F32ToF16(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := backend.F32ToF16(f); g != h {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
	for f, want := range map[float32]uint16{
		65504: 0x7bff, 65519: 0x7bff, 65520: 0x7c00, 1e9: 0x7c00, -1e9: 0xfc00,
		0x1p-24: 0x0001, 0x1p-25: 0x0000, 0x1.8p-25: 0x0001, 0x1.8p-24: 0x0002, // ties to even at the bottom
		1 + 0x1p-11: 0x3c00, 1 + 0x3p-11: 0x3c02, // ties to even at 1
	} {
		if got := backend.F32ToF16(f); got != want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", f, got, want)
		}
	}
	if got := backend.F32ToBF16(1 + 0x1p-8); got != 0x3f80 {
		t.Errorf("F32ToBF16(1+2^-8) = %#04x, want 0x3f80 (a tie goes to even)", got)
	}
}

func TestConvert(t *testing.T) {
	// 1 + 2^-11 + 2^-30 rounds up to float16 directly, but through
	// float32 it first becomes the tie 1 + 2^-11, which goes to even (1):
	// c10's double -> float -> half rounding, which Convert copies.
	src := []float64{1 + 0x1p-11 + 0x1p-30, -2.5, 1e6, 0}
	half := make([]uint16, len(src))
	if err := backend.Convert(pg.Float16s(half), pg.Float64s(src)); err != nil {
		t.Fatal(err)
	}
	want := []uint16{0x3c00, 0xc100, 0x7c00, 0}
	for i := range want {
		if half[i] != want[i] {
			t.Errorf("float64 %v -> float16 %#04x, want %#04x", src[i], half[i], want[i])
		}
	}
	back := make([]float64, len(src))
	if err := backend.Convert(pg.Float64s(back), pg.Float16s(half)); err != nil || back[1] != -2.5 ||
		!math.IsInf(back[2], 1) {
		t.Errorf("float16 -> float64: %v %v", back, err)
	}
	bf := make([]uint16, len(src))
	if err := backend.Convert(pg.BFloat16s(bf), pg.Float16s(half)); err != nil || backend.BF16ToF32(bf[1]) != -2.5 {
		t.Errorf("float16 -> bfloat16: %v %v", bf, err)
	}
	f32 := []float32{0, 0, 0, 0}
	if err := backend.Convert(pg.Float32s(f32), pg.Float64s(src)); err != nil || f32[1] != -2.5 {
		t.Errorf("float64 -> float32: %v %v", f32, err)
	}
	same := []float32{9, 9, 9, 9}
	if err := backend.Convert(pg.Float32s(same), pg.Float32s(f32)); err != nil || same[1] != -2.5 {
		t.Errorf("float32 -> float32: %v %v", same, err)
	}
	for name, err := range map[string]error{
		"int":    backend.Convert(pg.Int32s(make([]int32, 4)), pg.Float64s(src)),
		"length": backend.Convert(pg.Float32s(make([]float32, 3)), pg.Float64s(src)),
	} {
		if !errors.Is(err, pg.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
		}
	}
}

func BenchmarkConvert(b *testing.B) {
	const n = 1 << 18 // 1 MiB of float32
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(i) * 1e-3
	}
	half := make([]uint16, n)
	b.Run("float32-to-float16", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			_ = backend.Convert(pg.Float16s(half), pg.Float32s(src))
		}
	})
	b.Run("float16-to-float32", func(b *testing.B) {
		b.SetBytes(4 * n)
		for b.Loop() {
			_ = backend.Convert(pg.Float32s(src), pg.Float16s(half))
		}
	})
}

// TestConvertLongSlicesMatchElementwise converts slices long enough for
// the vector conversions (internal/vec), with random bit patterns (NaNs,
// infinities and subnormals among them) and a NaN-free stretch, and
// checks every element against the scalar conversion.
func TestConvertLongSlicesMatchElementwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	f := make([]float32, 100003)
	for i := range f {
		if i < 50000 {
			f[i] = float32(rng.NormFloat64())
		} else {
			f[i] = math.Float32frombits(rng.Uint32())
		}
	}
	h := make([]uint16, len(f))
	back := make([]float32, len(f))
	for _, c := range []struct {
		dt     pg.Dtype
		narrow func(float32) uint16
		widen  func(uint16) float32
	}{{pg.Float16, backend.F32ToF16, backend.F16ToF32}, {pg.BFloat16, backend.F32ToBF16, backend.BF16ToF32}} {
		half := pg.Tensor{Dtype: c.dt, Data: pg.Float16s(h).Data}
		if err := backend.Convert(half, pg.Float32s(f)); err != nil {
			t.Fatal(err)
		}
		for i, v := range f {
			if w := c.narrow(v); h[i] != w {
				t.Fatalf("%v: element %d (%#08x) became %#04x, want %#04x", c.dt, i, math.Float32bits(v), h[i], w)
			}
		}
		if err := backend.Convert(pg.Float32s(back), half); err != nil {
			t.Fatal(err)
		}
		for i, v := range h {
			if w := c.widen(v); math.Float32bits(back[i]) != math.Float32bits(w) {
				t.Fatalf("%v: element %d (%#04x) widened to %#08x, want %#08x", c.dt, i, v, math.Float32bits(back[i]),
					math.Float32bits(w))
			}
		}
	}
}
