package reducer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// Identical replicas pass; a single changed element on one rank fails
// every rank with ErrReplicasDiverged naming the parameter and which
// ranks hold which digest, and the reducer stays failed. Over tcp too.
func TestVerifyReplicas(t *testing.T) {
	for _, backend := range []string{"local", "tcp"} {
		t.Run(backend, func(t *testing.T) {
			ctx := testCtx(t)
			params := mlpParams(4, 3, 2) // fc1.weight fc1.bias fc2.weight fc2.bias
			gs := groupsOf(t, backend, 3)
			rs := make([]*Reducer, 3)
			values := make([][]pg.Tensor, 3)
			noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
				var err error
				rs[rank], err = New(ctx, g, params, Options{})
				values[rank] = sameValues(params) // the same on every rank: one seed
				return err
			}))
			noErrors(t,
				onGroups(gs, func(rank int, _ pg.ProcessGroup) error { return rs[rank].VerifyReplicas(ctx, values[rank]) }))
			values[2][2].Data[3*8] ^= 1 // the lowest bit of fc2.weight[3], on rank 2 // one element of fc2.weight, on rank 2
			errs := onGroups(gs, func(rank int, _ pg.ProcessGroup) error { return rs[rank].VerifyReplicas(ctx, values[rank]) })
			for rank, err := range errs {
				if !errors.Is(err, ErrReplicasDiverged) || !strings.Contains(err.Error(), "parameter 2 (fc2.weight)") ||
					!strings.Contains(err.Error(), "ranks 0,1 hold") || !strings.Contains(err.Error(), "ranks 2 hold") {
					t.Errorf("rank %d: %v; want ErrReplicasDiverged naming fc2.weight, ranks 0,1 and rank 2", rank, err)
				}
				if err := rs[rank].Prepare(ctx, Iteration{Sync: true}); !errors.Is(err, ErrReplicasDiverged) {
					t.Errorf("rank %d: Prepare after the failed check = %v; want the check's error", rank, err)
				}
			}
		})
	}
}

// One bit flipped anywhere in a tensor changes its digest, for every bit
// of every element tried, float32 and float64, at odd lengths too.
func TestDigestSeesEveryBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 17, 64} {
		for _, d := range []pg.Dtype{pg.Float32, pg.Float64} {
			v := pg.NewTensor(d, n)
			for k := range v.Data {
				v.Data[k] = byte(rng.Uint32())
			}
			want := digest(v)
			if want < 0 || want > digestMask {
				t.Fatalf("digest %x outside 62 bits", want)
			}
			for byteAt := range v.Data {
				for bit := range 8 {
					v.Data[byteAt] ^= 1 << bit
					if digest(v) == want {
						t.Fatalf("%v[%d]: flipping bit %d of byte %d leaves the digest", d, n, bit, byteAt)
					}
					v.Data[byteAt] ^= 1 << bit
				}
			}
			if digest(v) != want {
				t.Fatal("digest is not a function of the bytes")
			}
		}
	}
}

// The words ride on a larger allreduce MAX (ddp-train's stop signal): the
// check reads them after it, and a call with the wrong number of words is
// refused.
func TestCheckReplicaWordsInsideLargerAllreduce(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2)
	gs := groupsOf(t, "local", 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		r, err := New(ctx, g, params, Options{})
		if err != nil {
			return err
		}
		values := sameValues(params)
		if rank == 1 {
			pg.View[float64](values[1])[0] = 42
		}
		words := ReplicaWords([]int64{int64(rank)}, values)
		if err := g.AllReduce(ctx, pg.Int64s(words), pg.Op(pg.Max)).Wait(ctx); err != nil {
			return err
		}
		if words[0] != 1 {
			return fmt.Errorf("the carrying word is %d, want 1", words[0])
		}
		if err := r.CheckReplicaWords(ctx, words[2:], values); err == nil || strings.Contains(err.Error(), "differs") {
			return fmt.Errorf("misaligned words: %v; want the count refused", err)
		}
		if err := r.CheckReplicaWords(ctx, words[1:], values); !errors.Is(err, ErrReplicasDiverged) ||
			!strings.Contains(err.Error(), "parameter 1 (fc1.bias)") {
			return fmt.Errorf("CheckReplicaWords = %v; want fc1.bias named", err)
		}
		return nil
	}))
}

// sameValues gives each parameter float64 values of its size, the same on
// every call.
func sameValues(params []Param) []pg.Tensor {
	out := make([]pg.Tensor, len(params))
	for i, p := range params {
		out[i] = pg.Float64s(uniform[float64](p.Numel(), 1, uint64(i), 1))
	}
	return out
}

// BenchmarkCheckDisjoint is the per-iteration cost of Note [one memory per
// result]'s check, for as many gradients as ResNet-50 (161) and a model of
// 1,000 parameters.
func BenchmarkCheckDisjoint(b *testing.B) {
	for _, n := range []int{161, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r := &Reducer{params: make([]Param, n), dst: make([]pg.Tensor, n)}
			for i := range r.dst {
				r.dst[i] = pg.NewTensor(pg.Float32, 16)
			}
			b.ReportAllocs()
			for b.Loop() {
				if err := r.checkDisjoint(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnusedSetChangesByStepAndRank drives the reducer directly with a
// used set that differs by rank and by step (what a dynamic graph gives),
// under FindUnusedParameters: after each Finalize every rank's result for
// every parameter, read from the gradient it handed over or, where it
// handed none, from Gradient, is the plain average with zeros for the
// ranks that did not use it, bitwise equal across ranks; GloballyUnused
// names exactly the parameters no rank used.
func TestUnusedSetChangesByStepAndRank(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(4, 3, 3, 2) // 6 parameters
	const world, steps = 3, 6
	gs := groupsOf(t, "local", world)
	rs := make([]*Reducer, world)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		var err error
		rs[rank], err = New(ctx, g, params, Options{FindUnusedParameters: true, BucketCapBytes: 64, FirstBucketBytes: 64})
		return err
	}))
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range steps {
		used := make([][]bool, world) // used[rank][param]
		grads := make([][]pg.Tensor, world)
		for rank := range world {
			used[rank] = make([]bool, len(params))
			grads[rank] = make([]pg.Tensor, len(params))
			for i, p := range params {
				used[rank][i] = rng.IntN(3) > 0 || step == 0 && i == 0
				if step == 2 && i == 5 {
					used[rank][i] = false // no rank uses fc3.bias at step 2
				}
				if used[rank][i] {
					grads[rank][i] = pg.Float64s(uniform[float64](p.Numel(), uint64(100*step+rank), uint64(i), 1))
				}
			}
		}
		want := make([][]float64, len(params))
		for i, p := range params {
			want[i] = make([]float64, p.Numel())
			for rank := range world {
				if used[rank][i] {
					for k, v := range pg.View[float64](grads[rank][i]) {
						want[i][k] += v / world
					}
				}
			}
		}
		noErrors(t, onGroups(gs, func(rank int, _ pg.ProcessGroup) error {
			r := rs[rank]
			var unused []int
			for i := range params {
				if !used[rank][i] {
					unused = append(unused, i)
				}
			}
			if err := r.Prepare(ctx, Iteration{Sync: true, Unused: unused}); err != nil {
				return err
			}
			for i := len(params) - 1; i >= 0; i-- {
				if used[rank][i] {
					if err := r.MarkReady(i, grads[rank][i]); err != nil {
						return err
					}
				}
			}
			return r.Finalize(ctx)
		}))
		for rank := range world {
			unusedAll := rs[rank].GloballyUnused()
			for i := range params {
				none := !used[0][i] && !used[1][i] && !used[2][i]
				if (unusedAll != nil && unusedAll[i]) != none {
					t.Fatalf("step %d rank %d: GloballyUnused()[%d] = %v, want %v", step, rank, i, unusedAll != nil && unusedAll[i],
						none)
				}
				if none {
					continue // untouched, as torch leaves the grad
				}
				got := rs[rank].Gradient(i)
				if used[rank][i] {
					got = grads[rank][i]
				}
				g := pg.View[float64](got)
				for k := range g {
					if d := g[k] - want[i][k]; d > 1e-15 || d < -1e-15 {
						t.Fatalf("step %d rank %d %s[%d] = %v, want %v", step, rank, params[i].Name, k, g[k], want[i][k])
					}
					other := pg.View[float64](rs[0].Gradient(i))
					if used[0][i] {
						other = pg.View[float64](grads[0][i])
					}
					if g[k] != other[k] {
						t.Fatalf("step %d: rank %d's %s[%d] is %v, rank 0's %v", step, rank, params[i].Name, k, g[k], other[k])
					}
				}
			}
		}
	}
}

// With CheckFinite, a NaN in one rank's gradient makes every rank's
// Finalize return a NonFiniteError naming the parameter, at the same
// iteration; the iteration is complete, and the next one, finite, passes.
func TestCheckFinite(t *testing.T) {
	ctx := testCtx(t)
	params := mlpParams(3, 2) // fc1.weight, fc1.bias
	gs := groupsOf(t, "local", 2)
	noErrors(t, onGroups(gs, func(rank int, g pg.ProcessGroup) error {
		r, err := New(ctx, g, params, Options{CheckFinite: true})
		if err != nil {
			return err
		}
		for it := 1; it <= 3; it++ {
			grads := sameValues(params)
			if it == 2 && rank == 1 {
				pg.View[float64](grads[1])[1] = math.Inf(-1)
			}
			err := iterate(ctx, r, grads)
			var nf *NonFiniteError
			switch {
			case it == 2 && (!errors.As(err, &nf) || nf.Iteration != 2 || fmt.Sprint(nf.Names) != "[fc1.bias]"):
				return fmt.Errorf("iteration 2: %v; want a NonFiniteError naming fc1.bias at iteration 2", err)
			case it == 2 && !errors.Is(err, ErrNonFinite):
				return fmt.Errorf("iteration 2: %v does not wrap ErrNonFinite", err)
			case it != 2 && err != nil:
				return fmt.Errorf("iteration %d: %v", it, err)
			}
		}
		return nil
	}))
}

func TestFinite(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		want bool
	}{
		{[]float64{}, true}, {[]float64{1, -1e308, 1e308, 0, math.SmallestNonzeroFloat64}, true},
		{[]float64{1, 2, 3, 4, 5, math.NaN()}, false}, {[]float64{math.Inf(1)}, false},
		{[]float64{0, 0, 0, 0, math.Inf(-1), 0}, false},
		{[]float64{3}, true}, {[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9}, true},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, math.NaN()}, false},
		{[]float64{-math.MaxFloat32, math.MaxFloat32, -1, 1, 2, 3, 4, 5, 6, 7, 8}, true},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, math.Inf(-1), 9}, false}, {[]float64{-math.NaN()}, false},
	} {
		if got := Finite(pg.Float64s(c.v)); got != c.want {
			t.Errorf("Finite(%v) = %v", c.v, got)
		}
		f := make([]float32, len(c.v))
		for k, x := range c.v {
			f[k] = float32(x) // ±1e308 become ±Inf in float32
		}
		want := c.want && !slices.ContainsFunc(f, func(x float32) bool { return math.IsInf(float64(x), 0) })
		if got := Finite(pg.Float32s(f)); got != want {
			t.Errorf("Finite(float32 %v) = %v", f, got)
		}
	}
}

// BenchmarkFinite is the non-finite guard's scan, per byte.
func BenchmarkFinite(b *testing.B) {
	v := pg.Float32s(uniform[float32](1<<20, 1, 1, 1))
	b.SetBytes(int64(len(v.Data)))
	for b.Loop() {
		if !Finite(v) {
			b.Fatal("finite values reported non-finite")
		}
	}
}

// BenchmarkFiniteInCache is the scan of ddp-train's default MLP's bucket
// (118282 float32, 473 KB), which a step has just written: in cache.
func BenchmarkFiniteInCache(b *testing.B) {
	v := pg.Float32s(uniform[float32](118282, 1, 1, 1))
	b.SetBytes(int64(len(v.Data)))
	for b.Loop() {
		if !Finite(v) {
			b.Fatal("finite values reported non-finite")
		}
	}
}

// Finite agrees with math.IsNaN and math.IsInf on every position and
// every special value, float32 and float64, at lengths that end the
// 32-byte loop, the 8-byte loop and the odd float32.
func TestFiniteEveryPosition(t *testing.T) {
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.MaxFloat64, -math.SmallestNonzeroFloat64,
		math.MaxFloat32, 0}
	for n := 1; n <= 11; n++ {
		for pos := range n {
			for _, x := range specials {
				v := make([]float64, n)
				for k := range v {
					v[k] = float64(k) - 3.5
				}
				v[pos] = x
				f := make([]float32, n)
				for k := range v {
					f[k] = float32(v[k])
				}
				want64 := !math.IsNaN(x) && !math.IsInf(x, 0)
				want32 := !math.IsNaN(float64(f[pos])) && !math.IsInf(float64(f[pos]), 0)
				if Finite(pg.Float64s(v)) != want64 || Finite(pg.Float32s(f)) != want32 {
					t.Fatalf("n %d, position %d, %v: Finite float64 %v (want %v), float32 %v (want %v)", n, pos, x,
						Finite(pg.Float64s(v)), want64, Finite(pg.Float32s(f)), want32)
				}
			}
		}
	}
}
