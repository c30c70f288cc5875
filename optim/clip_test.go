package optim

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/goddp/ddp/pg"
)

// fma32 rounds a*b + c once: against big.Float's exact product and sum
// rounded to float32, on random operands and on sums just off a point
// halfway between two float32 values, where rounding to float64 first
// lands on the halfway point and then goes the wrong way.
func TestFMA32RoundsOnce(t *testing.T) {
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).Mul(big.NewFloat(float64(a)), big.NewFloat(float64(b)))
		f, _ := p.Add(p, big.NewFloat(float64(c))).Float32()
		return f
	}
	check := func(a, b, c float32) {
		t.Helper()
		if got, want := fma32(a, b, c), exact(a, b, c); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%v, %v, %v) = %v, want %v", a, b, c, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		check(float32(rng.NormFloat64()), float32(rng.NormFloat64()),
			float32(rng.NormFloat64()*math.Ldexp(1, rng.IntN(60)-30)))
	}
	// (1+k·2⁻²³)·2⁻²⁴(1−j·2⁻²³) + (1+m·2⁻²³) is 2⁻⁷⁰-close to halfway for k = j.
	ulp := math.Ldexp(1, -23)
	for k := range 8 {
		for j := range 8 {
			for m := range 8 {
				check(float32(1+float64(k)*ulp), float32(math.Ldexp(1-float64(j)*ulp, -24)), float32(1+float64(m)*ulp))
				check(float32(1+float64(k)*ulp), -float32(math.Ldexp(1-float64(j)*ulp, -24)), float32(1+float64(m)*ulp))
			}
		}
	}
	a, b, c := float32(1+ulp), float32(math.Ldexp(1-ulp, -24)), float32(1+ulp)
	if twice := float32(math.FMA(float64(a), float64(b), float64(c))); twice == fma32(a, b, c) {
		t.Errorf("the halfway case is not one: rounding twice gives %v too", twice)
	}
}

// The 2-norm of [3, 4] is 5; with max norm 1 every gradient is scaled by
// (1/(5+1e-6))·1, in float64 and in float32 alike; a max norm above the
// norm scales by exactly 1.
func TestClipGradNormScales(t *testing.T) {
	for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
		grads := tensors(d, [][]float64{{3}, {4}})
		total, err := ClipGradNorm(grads, 1, 2)
		if err != nil || total != 5 {
			t.Fatalf("%v: total %v, %v; want 5", d, total, err)
		}
		coef := 1 / (5 + 1e-6)
		if d == pg.Float32 {
			coef = float64(float32(1/(float32(5)+float32(1e-6))) * float32(1))
		}
		got := [][]float64{toFloat64s(grads[0]), toFloat64s(grads[1])}
		want := [][]float64{{float64(scaleIn(d, 3, coef))}, {float64(scaleIn(d, 4, coef))}}
		if !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			t.Errorf("%v: clipped to %v, want %v", d, got, want)
		}
		grads = tensors(d, [][]float64{{0.3, -0.4}})
		if _, err := (ClipNorm{MaxNorm: 10}).Clip(grads); err != nil { // NormType 0: the 2-norm
			t.Fatal(err)
		}
		if got := toFloat64s(grads[0]); !slices.Equal(got, toFloat64s(tensors(d, [][]float64{{0.3, -0.4}})[0])) {
			t.Errorf("%v: a norm below the maximum changed the gradients to %v", d, got)
		}
	}
}

func scaleIn(d pg.Dtype, v, coef float64) float64 {
	if d == pg.Float32 {
		return float64(float32(v) * float32(coef))
	}
	return v * coef
}

// A gradient with nil Data is torch's None: not counted, not written.
// With none at all the total is 0.
func TestClipSkipsMissingGradients(t *testing.T) {
	grads := []pg.Tensor{{Dtype: pg.Float64}, pg.Float64s([]float64{0, -2}), {Dtype: pg.Float32}}
	for _, p := range []float64{1, 2, math.Inf(1)} {
		if total, err := TotalNorm(grads, p); err != nil || total != 2 {
			t.Errorf("p=%v: total %v, %v; want 2", p, total, err)
		}
	}
	if _, err := ClipGradNorm(grads, 1, 2); err != nil {
		t.Fatal(err)
	}
	if err := ClipGradValue(grads, 0.5); err != nil {
		t.Fatal(err)
	}
	if grads[0].Data != nil || grads[2].Data != nil {
		t.Error("clipping gave a missing gradient memory")
	}
	if got := pg.View[float64](grads[1]); got[0] != 0 || got[1] != -0.5 {
		t.Errorf("clipped to %v, want [0 -0.5]", got)
	}
	if total, err := ClipGradNorm([]pg.Tensor{{Dtype: pg.Float32}}, 1, 2); err != nil || total != 0 {
		t.Errorf("no gradients: total %v, %v; want 0", total, err)
	}
}

// A NaN or an infinity makes the total norm non-finite. By default, as in
// torch, the gradients are scaled anyway (by NaN, or by 0 for an
// infinite norm); ErrorIfNonfinite refuses and leaves them.
func TestClipNonfiniteNorm(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(-1)} {
		grads := []pg.Tensor{pg.Float64s([]float64{1, bad}), pg.Float64s([]float64{2})}
		total, err := ClipNorm{MaxNorm: 1, ErrorIfNonfinite: true}.Clip(grads)
		if !errors.Is(err, ErrNonfiniteNorm) || !math.IsNaN(total) && !math.IsInf(total, 1) {
			t.Fatalf("%v: total %v, error %v; want a non-finite total and ErrNonfiniteNorm", bad, total, err)
		}
		if got := pg.View[float64](grads[1]); got[0] != 2 {
			t.Errorf("%v: ErrorIfNonfinite changed a gradient to %v", bad, got)
		}
		if _, err := ClipGradNorm(grads, 1, 2); err != nil {
			t.Fatal(err)
		}
		want := 0.0 // coef = (1/Inf)·1
		if math.IsNaN(bad) {
			want = math.NaN()
		}
		if got := pg.View[float64](grads[1])[0]; got != want && !(math.IsNaN(got) && math.IsNaN(want)) {
			t.Errorf("%v: scaled a finite gradient to %v, want %v as torch", bad, got, want)
		}
	}
}

func TestClipRejectsBadArguments(t *testing.T) {
	good := func() []pg.Tensor { return []pg.Tensor{pg.Float64s([]float64{1, 2})} }
	for _, c := range []struct {
		name string
		err  error
	}{
		{"max norm < 0", func() error { _, err := ClipGradNorm(good(), -1, 2); return err }()},
		{"max norm NaN", func() error { _, err := ClipGradNorm(good(), math.NaN(), 2); return err }()},
		{"norm type < 0", func() error { _, err := ClipGradNorm(good(), 1, -2); return err }()},
		{"norm type -Inf", func() error { _, err := TotalNorm(good(), math.Inf(-1)); return err }()},
		{"norm type 0", func() error { _, err := TotalNorm(good(), 0); return err }()},
		{"int64", func() error { _, err := ClipGradNorm([]pg.Tensor{pg.Int64s([]int64{1})}, 1, 2); return err }()},
		{"value < 0", ClipGradValue(good(), -1)},
		{"value NaN", ClipGradValue(good(), math.NaN())},
		{"value on int32", ClipGradValue([]pg.Tensor{pg.Int32s([]int32{1})}, 1)},
	} {
		if c.err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// Clipping is a function of the gradients alone: the same values give the
// same bits, whatever else ran before (no state, no threads).
func TestClipIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	d := []pg.Dtype{pg.Float32, pg.Float32, pg.Float32, pg.Float32, pg.Float32, pg.Float32, pg.Float32, pg.Float32}
	vals := clipGrads(rng, d, clipShapes)
	var first [][]float64
	for range 3 {
		grads := tensorsOf(vals, d)
		if _, err := ClipGradNorm(grads, 0.1, 2); err != nil {
			t.Fatal(err)
		}
		var got [][]float64
		for _, g := range grads {
			got = append(got, toFloat64s(g))
		}
		if first == nil {
			first = got
		} else if !slices.EqualFunc(first, got, slices.Equal) {
			t.Fatal("the same gradients clipped to different values")
		}
	}
}
