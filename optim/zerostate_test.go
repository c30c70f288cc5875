package optim

import (
	"context"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/local"
)

// zeroSizes has parameters of many sizes, more than some worlds' ranks.
var zeroSizes = []int{7, 30, 5, 12, 1, 30, 64}

// zeroGrads is the gradient sequence of every run: step s, parameter i;
// parameter 4 has no gradient in step 1 (torch's None).
func zeroGrads(step int) []pg.Tensor {
	rng := rand.New(rand.NewPCG(uint64(step), 38))
	gs := make([]pg.Tensor, len(zeroSizes))
	for i, n := range zeroSizes {
		if i == 4 && step == 1 {
			continue
		}
		v := make([]float64, n)
		for k := range v {
			v[k] = rng.NormFloat64()
		}
		gs[i] = pg.Float64s(v)
	}
	return gs
}

func zeroParams() []pg.Tensor {
	ps := make([]pg.Tensor, len(zeroSizes))
	for i, n := range zeroSizes {
		v := make([]float64, n)
		for k := range v {
			v[k] = float64(i+1) * 0.01 * float64(k%5-2)
		}
		ps[i] = pg.Float64s(v)
	}
	return ps
}

// plainRun steps the unsharded optimizer from params and state for steps
// [from, to), and returns the parameters and the state.
func plainRun(t *testing.T, name string, params []pg.Tensor, s *State, from, to int) ([]pg.Tensor, State) {
	t.Helper()
	opt, err := NewWith(name, Options{LR: Set(0.05)}, len(zeroSizes))
	if err != nil {
		t.Fatal(err)
	}
	if s != nil {
		if err := opt.Load(*s); err != nil {
			t.Fatal(err)
		}
	}
	for step := from; step < to; step++ {
		if step == 2 {
			if err := opt.SetLR(0.03); err != nil {
				t.Fatal(err)
			}
		}
		if err := opt.Step(params, zeroGrads(step)); err != nil {
			t.Fatal(err)
		}
	}
	return params, opt.State()
}

// zeroRun steps a Zero on each rank of a world of size world, as plainRun
// does, and returns every rank's parameters, consolidated state and state
// bytes.
func zeroRun(t *testing.T, name string, world int, s *State, start []pg.Tensor,
	from, to int) ([][]pg.Tensor, []State, []int64) {
	t.Helper()
	groups, err := local.New(world, local.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	params, states, bytes := make([][]pg.Tensor, world), make([]State, world), make([]int64, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			defer groups[r].Close()
			params[r], states[r], bytes[r], errs[r] = zeroRank(groups[r], name, s, start, from, to)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d of %d: %v", r, world, err)
		}
	}
	return params, states, bytes
}

func zeroRank(g pg.ProcessGroup, name string, s *State, start []pg.Tensor,
	from, to int) ([]pg.Tensor, State, int64, error) {
	ctx := context.Background()
	z, err := NewZero(g, name, Options{LR: Set(0.05)}, zeroSizes, ZeroOptions{Timeout: 20 * time.Second})
	if err != nil {
		return nil, State{}, 0, err
	}
	if s != nil {
		if err := z.Load(*s); err != nil {
			return nil, State{}, 0, err
		}
	}
	return zeroSteps(ctx, z, start, from, to)
}

func zeroSteps(ctx context.Context, z *Zero, params []pg.Tensor, from, to int) ([]pg.Tensor, State, int64, error) {
	params = cloneTensors(params)
	for step := from; step < to; step++ {
		if step == 2 {
			if err := z.SetLR(0.03); err != nil {
				return nil, State{}, 0, err
			}
		}
		grads := zeroGrads(step)
		for i := range grads { // another rank's gradients are not read
			if !z.Owns(i) && grads[i].Data != nil {
				grads[i] = pg.Float64s(make([]float64, zeroSizes[i]))
			}
		}
		if err := z.StepContext(ctx, params, grads); err != nil {
			return nil, State{}, 0, err
		}
	}
	s, err := z.Consolidate(ctx)
	return params, s, z.StateBytes(), err
}

func cloneTensors(ts []pg.Tensor) []pg.Tensor {
	out := make([]pg.Tensor, len(ts))
	for i, t := range ts {
		out[i] = pg.Float64s(append([]float64(nil), pg.View[float64](t)...))
	}
	return out
}

func equalTensors(a, b []pg.Tensor) bool {
	for i := range a {
		if !reflect.DeepEqual(pg.View[float64](a[i]), pg.View[float64](b[i])) {
			return false
		}
	}
	return len(a) == len(b)
}

// Zero's parameters and consolidated state are bitwise the unsharded
// optimizer's on every rank, for every optimizer and world size, with a
// skipped gradient and a changed rate; and each rank's state is its share.
func TestZeroMatchesUnsharded(t *testing.T) {
	for _, name := range Names() {
		want, wantState := plainRun(t, name, zeroParams(), nil, 0, 5)
		total := int64(0)
		for _, n := range zeroSizes {
			total += int64(n * 8 * len(baseOf(mustNew(t, name)).kinds))
		}
		for _, world := range []int{1, 2, 3, 4, 9} {
			params, states, bytes := zeroRun(t, name, world, nil, zeroParams(), 0, 5)
			sum := int64(0)
			for r := range world {
				if !equalTensors(params[r], want) {
					t.Errorf("%s, %d ranks: rank %d's parameters differ from the unsharded run's", name, world, r)
				}
				if !reflect.DeepEqual(states[r], wantState) {
					t.Errorf("%s, %d ranks: rank %d's consolidated state differs:\n got %v\nwant %v", name, world, r,
						states[r], wantState)
				}
				sum += bytes[r]
				if limit := total/int64(world) + 64*8*int64(len(baseOf(mustNew(t, name)).kinds)); bytes[r] > limit {
					t.Errorf("%s, %d ranks: rank %d holds %d bytes of state, more than total/N + the largest (%d)", name,
						world, r, bytes[r], limit)
				}
			}
			if sum != total {
				t.Errorf("%s, %d ranks: the shards hold %d bytes, want the unsharded %d", name, world, sum, total)
			}
		}
	}
}

func mustNew(t *testing.T, name string) Optimizer {
	t.Helper()
	o, err := NewWith(name, Options{LR: Set(0.05)}, len(zeroSizes))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// A consolidated state taken on 3 ranks resumes on 2 ranks, on 1 and
// unsharded, each ending bitwise where the uninterrupted run ends.
func TestZeroReshard(t *testing.T) {
	want, _ := plainRun(t, "adamw", zeroParams(), nil, 0, 6)
	params, states, _ := zeroRun(t, "adamw", 3, nil, zeroParams(), 0, 3)
	for _, world := range []int{2, 1, 4} {
		got, _, _ := zeroRun(t, "adamw", world, &states[0], params[0], 3, 6)
		for r := range world {
			if !equalTensors(got[r], want) {
				t.Errorf("resumed on %d ranks: rank %d's parameters differ from the uninterrupted run's", world, r)
			}
		}
	}
	plain, _ := plainRun(t, "adamw", cloneTensors(params[0]), &states[0], 3, 6)
	if !equalTensors(plain, want) {
		t.Error("resumed unsharded: the parameters differ from the uninterrupted run's")
	}
}

// Bad input is refused with the reason.
func TestZeroRefuses(t *testing.T) {
	groups, err := local.New(2, local.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer groups[0].Close()
	defer groups[1].Close()
	if _, err := NewZero(nil, "adam", Options{}, []int{3}, ZeroOptions{}); err == nil {
		t.Error("no group accepted")
	}
	if _, err := NewZero(groups[0], "lamb", Options{}, []int{3}, ZeroOptions{}); err == nil {
		t.Error("an unknown optimizer accepted")
	}
	z, err := NewZero(groups[0], "adam", Options{}, []int{3, 4}, ZeroOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Step([]pg.Tensor{pg.Float64s(make([]float64, 3))}, nil); err == nil {
		t.Error("a Step with one parameter of two accepted")
	}
	if err := z.Load(State{Name: "sgd"}); err == nil {
		t.Error("another optimizer's state accepted")
	}
	if err := z.Load(State{Name: "adam", Step: 1, Buffers: map[string][]float64{"exp_avg/0": {1}}}); err == nil {
		t.Error("a buffer of the wrong length accepted")
	}
	if err := z.Load(State{Name: "adam", Step: 1, Buffers: map[string][]float64{"exp_avg/7": {1}}}); err == nil {
		t.Error("a buffer of a parameter the model lacks accepted")
	}
}
