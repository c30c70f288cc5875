package kernel

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// The references here decode and round by arithmetic on float64 values
// (math.Ldexp, a search of the sorted table of every finite value),
// sharing nothing with the bit tricks under test.

// refF16 is the value of the binary16 pattern h.
func refF16(h uint16) float64 {
	return refDecode(h, 10, 15)
}

// refBF16 is the value of the bfloat16 pattern h.
func refBF16(h uint16) float64 {
	return refDecode(h, 7, 127)
}

// refDecode decodes a 16-bit float with mbits mantissa bits and the given
// exponent bias.
func refDecode(h uint16, mbits, bias int) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	emax := (1 << (15 - mbits)) - 1
	e, m := int(h>>mbits)&emax, float64(h&(1<<mbits-1))
	switch e {
	case 0:
		return sign * math.Ldexp(m, 1-bias-mbits)
	case emax:
		if m == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	return sign * math.Ldexp(m+float64(int(1)<<mbits), e-bias-mbits)
}

// rounder rounds float64 values to a 16-bit format, to nearest, ties to
// even, by binary search over the ascending values of the positive
// patterns 0 .. inf. The pattern inf stands, for rounding, for the first
// value past the largest finite one (2^emax), so that values at or past
// the midpoint round to infinity exactly as IEEE 754 says.
type rounder struct {
	vals []float64 // vals[p] is the value of positive pattern p
	inf  uint16
}

func newRounder(decode func(uint16) float64, inf uint16, past float64) rounder {
	vals := make([]float64, int(inf)+1)
	for p := range vals {
		vals[p] = decode(uint16(p))
	}
	vals[inf] = past
	return rounder{vals: vals, inf: inf}
}

func (r rounder) round(f float32) uint16 {
	x := float64(f)
	var sign uint16
	if math.Signbit(x) {
		sign, x = 0x8000, -x
	}
	i := sort.SearchFloat64s(r.vals, x)
	switch {
	case i == len(r.vals):
		return sign | r.inf
	case r.vals[i] == x || i == 0:
		return sign | uint16(i)
	}
	lo, hi := r.vals[i-1], r.vals[i]
	switch {
	case x-lo < hi-x:
		i--
	case x-lo == hi-x && i%2 == 1:
		i--
	}
	return sign | uint16(i)
}

func f16Rounder() rounder  { return newRounder(refF16, 0x7c00, 65536) }
func bf16Rounder() rounder { return newRounder(refBF16, 0x7f80, math.Ldexp(1, 128)) }

func isNaN16(h uint16, inf uint16) bool { return h&inf == inf && h&^(inf|0x8000) != 0 }

func TestF16ToF32Exhaustive(t *testing.T) {
	for p := range 1 << 16 {
		h := uint16(p)
		got, want := F16ToF32(h), refF16(h)
		if math.IsNaN(want) {
			// A NaN keeps its sign and payload.
			wantBits := uint32(h&0x8000)<<16 | 0x7f800000 | uint32(h&0x3ff)<<13
			if math.Float32bits(got) != wantBits {
				t.Errorf("F16ToF32(%#04x) = %#08x, want NaN %#08x", h, math.Float32bits(got), wantBits)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Errorf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	for p := range 1 << 16 {
		h := uint16(p)
		got, want := BF16ToF32(h), refBF16(h)
		if math.IsNaN(want) {
			if math.Float32bits(got) != uint32(h)<<16 {
				t.Errorf("BF16ToF32(%#04x) = %#08x, want NaN %#08x", h, math.Float32bits(got), uint32(h)<<16)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Errorf("BF16ToF32(%#04x) = %v, want %v", h, got, want)
		}
	}
}

func TestHalfRoundTripExhaustive(t *testing.T) {
	for _, c := range []struct {
		name   string
		widen  func(uint16) float32
		narrow func(float32) uint16
		inf    uint16
	}{{"float16", F16ToF32, F32ToF16, 0x7c00}, {"bfloat16", BF16ToF32, F32ToBF16, 0x7f80}} {
		for p := range 1 << 16 {
			h := uint16(p)
			got := c.narrow(c.widen(h))
			if isNaN16(h, c.inf) {
				if !isNaN16(got, c.inf) || got&0x8000 != h&0x8000 || got&(c.inf>>1&^c.inf) == 0 {
					// The last test: the quiet bit, the mantissa's top bit.
					t.Errorf("%s: NaN %#04x came back as %#04x, want a quiet NaN of the same sign", c.name, h, got)
				}
				continue
			}
			if got != h {
				t.Errorf("%s: %#04x came back as %#04x", c.name, h, got)
			}
		}
	}
}

// roundingInputs returns float32 values that probe rounding to a 16-bit
// format whose finite positive values are vals[:inf]: every value, every
// midpoint between neighbours (the ties) and the float32s either side of
// it, random values between neighbours, random bit patterns, and the
// specials. Both signs.
func roundingInputs(vals []float64, inf int) []float32 {
	rng := rand.New(rand.NewPCG(1, 2))
	var in []float32
	for p := range inf {
		v := float32(vals[p])
		mid := float32((vals[p] + vals[p+1]) / 2) // exact: 16-bit formats need <= 12 bits
		between := float32(vals[p] + rng.Float64()*(vals[p+1]-vals[p]))
		in = append(in, v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))),
			mid, math.Nextafter32(mid, 0), math.Nextafter32(mid, float32(math.Inf(1))), between)
	}
	for range 200_000 {
		in = append(in, math.Float32frombits(rng.Uint32()))
	}
	in = append(in, 0, float32(math.Inf(1)), math.MaxFloat32, math.SmallestNonzeroFloat32,
		math.Float32frombits(0x7f800001), math.Float32frombits(0x7fc00000), math.Float32frombits(0x7fbfffff))
	for _, v := range in[:len(in):len(in)] {
		in = append(in, -v)
	}
	return in
}

func TestF32ToF16RoundsToNearestEven(t *testing.T) {
	r := f16Rounder()
	checkRounding(t, "F32ToF16", F32ToF16, r, roundingInputs(r.vals, int(r.inf)))
	// The subnormal results come from float addition: sweep them densely.
	var sweep []float32
	for u := uint32(102 << 23); u < 113<<23; u += 61 {
		sweep = append(sweep, math.Float32frombits(u), -math.Float32frombits(u))
	}
	checkRounding(t, "F32ToF16", F32ToF16, r, sweep)
}

func TestF32ToBF16RoundsToNearestEven(t *testing.T) {
	r := bf16Rounder()
	checkRounding(t, "F32ToBF16", F32ToBF16, r, roundingInputs(r.vals, int(r.inf)))
}

func checkRounding(t *testing.T, name string, f func(float32) uint16, r rounder, in []float32) {
	t.Helper()
	bad := 0
	for _, x := range in {
		got := f(x)
		if math.IsNaN(float64(x)) {
			if !isNaN16(got, r.inf) || (got&0x8000 != 0) != math.Signbit(float64(x)) {
				t.Errorf("%s(NaN %#08x) = %#04x, want a NaN of the same sign", name, math.Float32bits(x), got)
				bad++
			}
		} else if want := r.round(x); got != want {
			t.Errorf("%s(%v = %#08x) = %#04x, want %#04x", name, x, math.Float32bits(x), got, want)
			bad++
		}
		if bad > 20 {
			t.Fatal("too many errors")
		}
	}
}

// TestRounderAgreesWithIEEE checks the reference itself where IEEE 754
// fixes the answer.
func TestRounderAgreesWithIEEE(t *testing.T) {
	r := f16Rounder()
	for _, c := range []struct {
		x    float32
		want uint16
	}{
		{1, 0x3c00}, {65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00},
		{0x1p-24, 0x0001}, {0x1p-25, 0x0000}, {0x1.8p-24, 0x0002}, {0x1.000002p-25, 0x0001},
		{1 + 0x1p-11, 0x3c00}, {1 + 0x3p-11, 0x3c02}, {-2, 0xc000},
	} {
		if got := r.round(c.x); got != c.want {
			t.Errorf("reference rounds %v to %#04x, want %#04x", c.x, got, c.want)
		}
	}
}
