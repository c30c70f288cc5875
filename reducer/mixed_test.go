package reducer

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/goddp/ddp/commhook"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
)

// mixedParams are float32 master parameters.
func mixedParams() []Param {
	return []Param{
		{Name: "fc1.weight", Shape: []int{6, 5}, Dtype: pg.Float32},
		{Name: "fc1.bias", Shape: []int{5}, Dtype: pg.Float32},
		{Name: "fc2.weight", Shape: []int{5, 3}, Dtype: pg.Float32},
		{Name: "fc2.bias", Shape: []int{3}, Dtype: pg.Float32},
	}
}

// lowGrad is rank r's gradient of parameter i in micro-batch m of step s,
// rounded to dt, as an engine computing in dt would hand it over. The
// values span several binades, so sums and divisions round.
func lowGrad(dt pg.Dtype, n, s, r, m, i int) pg.Tensor {
	v := uniform[float32](n, uint64(1+s*100+m*10+r), uint64(i), 1)
	for k := range v {
		v[k] *= float32(math.Ldexp(1, k%7-3))
	}
	out := pg.NewTensor(dt, n)
	if err := backend.Convert(out, pg.Float32s(v)); err != nil {
		panic(err)
	}
	return out
}

// mixedReference computes, serially and with the reducer's roundings,
// what Gradient(i) must hold after one step: each rank's micro-batch
// gradients accumulated in the param dtype, cast to the reduce dtype,
// summed in float32 in rank order and rounded once (as pg/local reduces
// half precision), divided by n in the reduce dtype, cast to float32.
func mixedReference(mp MixedPrecision, params []Param, n, step, micro int) [][]float32 {
	reduce := mp.ReduceDtype
	if reduce == 0 {
		reduce = mp.ParamDtype
	}
	out := make([][]float32, len(params))
	for i, p := range params {
		acc := make([]float32, p.Numel())
		for r := range n {
			local := lowGrad(mp.ParamDtype, p.Numel(), step, r, 0, i)
			for m := 1; m < micro; m++ {
				must(backend.Add(local, lowGrad(mp.ParamDtype, p.Numel(), step, r, m, i)))
			}
			cast := pg.NewTensor(reduce, p.Numel())
			must(backend.Convert(cast, local))
			wide := make([]float32, p.Numel())
			must(backend.Convert(pg.Float32s(wide), cast))
			for k, v := range wide {
				acc[k] += v
			}
		}
		sum := pg.NewTensor(reduce, p.Numel())
		must(backend.Convert(sum, pg.Float32s(acc)))
		must(commhook.Divide(sum, n))
		out[i] = make([]float32, p.Numel())
		must(backend.Convert(pg.Float32s(out[i]), sum))
	}
	return out
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

type mixedCase struct {
	backend string
	n       int
	mp      MixedPrecision
	micro   int
	view    bool
}

// The reducer with MixedPrecision: float16 (or bfloat16) gradients of
// float32 parameters, reduced in the reduce dtype, give float32 gradients
// bitwise equal to a serial computation with the same roundings, through
// the bucket rebuild and no_sync accumulation, with and without bucket
// views.
func TestMixedPrecision(t *testing.T) {
	ctx := testCtx(t)
	params := mixedParams()
	small := Options{BucketCapBytes: 64, FirstBucketBytes: 32}
	for _, c := range []mixedCase{
		{"local", 2, MixedPrecision{ParamDtype: pg.Float16}, 1, false},
		{"local", 3, MixedPrecision{ParamDtype: pg.Float16, ReduceDtype: pg.Float16}, 2, false},
		{"local", 3, MixedPrecision{ParamDtype: pg.BFloat16}, 1, true},
		{"local", 3, MixedPrecision{ParamDtype: pg.Float16, ReduceDtype: pg.Float32}, 2, false},
		{"local", 2, MixedPrecision{ParamDtype: pg.Float16, ReduceDtype: pg.BFloat16}, 1, false},
		{"tcp", 2, MixedPrecision{ParamDtype: pg.Float16}, 2, true},
		{"tcp", 2, MixedPrecision{ParamDtype: pg.BFloat16, ReduceDtype: pg.Float32}, 1, false},
	} {
		name := fmt.Sprintf("%s/N=%d/param=%v/reduce=%v/micro=%d/view=%v", c.backend, c.n, c.mp.ParamDtype, c.mp.ReduceDtype,
			c.micro, c.view)
		t.Run(name, func(t *testing.T) {
			const steps = 3
			opts := small
			mp := c.mp
			opts.MixedPrecision, opts.GradientAsBucketView = &mp, c.view
			got := make([][][][]float32, c.n) // rank -> step -> parameter
			noErrors(t, onGroups(groupsOf(t, c.backend, c.n), func(rank int, g pg.ProcessGroup) error {
				r, err := New(ctx, g, params, opts)
				if err != nil {
					return err
				}
				for s := range steps {
					for m := range c.micro {
						if err := r.Prepare(ctx, Iteration{Sync: m == c.micro-1}); err != nil {
							return err
						}
						for i := len(params) - 1; i >= 0; i-- {
							grad := lowGrad(c.mp.ParamDtype, params[i].Numel(), s, rank, m, i)
							if c.view { // the engine writes into the bucket (adds, while accumulating)
								buf := r.GradientBuffer(i)
								if r.Accumulating() {
									if err := backend.Add(buf, grad); err != nil {
										return err
									}
								} else {
									copy(buf.Data, grad.Data)
								}
								grad = buf
							}
							if err := r.MarkReady(i, grad); err != nil {
								return err
							}
						}
						if err := r.Finalize(ctx); err != nil {
							return err
						}
					}
					var step [][]float32
					for i := range params {
						gi := r.Gradient(i)
						if gi.Dtype != pg.Float32 {
							return fmt.Errorf("Gradient(%d) is %v, want the parameter's float32", i, gi.Dtype)
						}
						step = append(step, append([]float32(nil), pg.View[float32](gi)...))
					}
					got[rank] = append(got[rank], step)
				}
				if st := r.CopyStats(); c.view && (st.In != 0 || st.Fallbacks != 0) {
					return fmt.Errorf("with bucket views the reducer copied gradients in: %+v", st)
				}
				return nil
			}))
			differs := false
			for s := range steps {
				want := mixedReference(c.mp, params, c.n, s, c.micro)
				for rank := range c.n {
					for i := range params {
						for k, w := range want[i] {
							if g := got[rank][s][i][k]; math.Float32bits(g) != math.Float32bits(w) {
								t.Fatalf("rank %d step %d: %s[%d] = %v, want %v", rank, s, params[i].Name, k, g, w)
							}
						}
						if !differs {
							differs = differsFromFloat32(want[i], c, params[i].Numel(), i, s)
						}
					}
				}
			}
			if c.mp.reduceDtype() != pg.Float32 && !differs {
				t.Error("the low-precision result equals the float32 average everywhere: the rounding is not tested")
			}
		})
	}
}

// differsFromFloat32 reports whether want differs somewhere from the
// same gradients averaged in float32 throughout (accumulated, summed and
// divided without rounding to a lower precision): whether the test can
// tell the reduce dtype's rounding from none.
func differsFromFloat32(want []float32, c mixedCase, numel, i, s int) bool {
	avg := make([]float32, numel)
	for r := range c.n {
		for m := range c.micro {
			wide := make([]float32, numel)
			must(backend.Convert(pg.Float32s(wide), lowGrad(c.mp.ParamDtype, numel, s, r, m, i)))
			for k, v := range wide {
				avg[k] += v
			}
		}
	}
	for k := range avg {
		if avg[k]/float32(c.n) != want[k] {
			return true
		}
	}
	return false
}

func TestMixedPrecisionRefuses(t *testing.T) {
	ctx := testCtx(t)
	params := mixedParams()
	half := &MixedPrecision{ParamDtype: pg.Float16}
	noErrors(t, onRanks(world(t, 1), func(_ int, g pg.ProcessGroup) error {
		if _, err := New(ctx, g, params, Options{MixedPrecision: half, Hook: commhook.Allreduce{}}); !errors.Is(err,
			ErrHookRegistration) {
			return fmt.Errorf("MixedPrecision with a Hook: err = %v, want ErrHookRegistration", err)
		}
		if _, err := New(ctx, g, params, Options{MixedPrecision: &MixedPrecision{ParamDtype: pg.Int32}}); err == nil {
			return errors.New("an int32 ParamDtype was accepted")
		}
		r, err := New(ctx, g, params, Options{MixedPrecision: half})
		if err != nil {
			return err
		}
		if err := r.RegisterCommHook(commhook.Allreduce{}); !errors.Is(err, ErrHookRegistration) {
			return fmt.Errorf("RegisterCommHook with MixedPrecision: err = %v, want ErrHookRegistration", err)
		}
		if err := r.Prepare(ctx, Iteration{Sync: true}); err != nil {
			return err
		}
		if err := r.MarkReady(0, pg.NewTensor(pg.Float32, params[0].Numel())); !errors.Is(err, ErrBadGradient) {
			return fmt.Errorf("a float32 gradient with ParamDtype float16: err = %v, want ErrBadGradient", err)
		}
		return nil
	}))
}
