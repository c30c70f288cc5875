package checkpoint_test

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/goddp/ddp/checkpoint"

	"github.com/goddp/ddp/model"
	"github.com/goddp/ddp/optim"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// run is a model in training, without DDP.
type run struct {
	spec model.Spec
	p    *model.Params
	net  *model.Net
	vm   gorgonia.VM
	opt  optim.Optimizer
}

func newRun(t *testing.T, spec model.Spec, seed uint64, opt string) *run {
	t.Helper()
	p, err := model.NewParams(spec, seed)
	if err != nil {
		t.Fatal(err)
	}
	net, err := p.Forward(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.Grad(net.Loss, p.Nodes...); err != nil {
		t.Fatal(err)
	}
	o, err := optim.New(opt, 0.01, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(p.Graph)
	t.Cleanup(func() { vm.Close() })
	return &run{spec: spec, p: p, net: net, vm: vm, opt: o}
}

// steps trains on the batches of steps [from, to): batch s is drawn from
// seed s, so a resumed run sees what an uninterrupted one would.
func (r *run) steps(t *testing.T, from, to int) {
	t.Helper()
	for s := from; s < to; s++ {
		rng := rand.New(rand.NewPCG(uint64(s), 0))
		x := make([]float64, r.spec.Batch*r.spec.Features())
		labels := make([]int, r.spec.Batch)
		for k := range x {
			x[k] = rng.NormFloat64()
		}
		for k := range labels {
			labels[k] = rng.IntN(r.spec.Classes)
		}
		if err := r.net.Feed(r.spec, x, labels); err != nil {
			t.Fatal(err)
		}
		if err := r.vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		ps, gs, err := optim.NodeTensors(r.p.Nodes)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.opt.Step(ps, gs); err != nil {
			t.Fatal(err)
		}
		r.vm.Reset()
	}
}

// Training 3 steps, checkpointing, and resuming in a fresh model and
// optimizer for 3 more gives bitwise the parameters of 6 uninterrupted
// steps.
func TestResumeEqualsUninterruptedRun(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, opt := range optim.Names() {
			t.Run(dt.String()+"/"+opt, func(t *testing.T) {
				spec := model.Spec{Kind: "mlp", InputShape: []int{5}, Hidden: []int{7}, Activation: "relu", Classes: 3, Dtype: dt,
					Batch: 4}
				whole := newRun(t, spec, 1, opt)
				whole.steps(t, 0, 6)

				first := newRun(t, spec, 1, opt)
				first.steps(t, 0, 3)
				dir := filepath.Join(t.TempDir(), "ckpt")
				if err := checkpoint.Save(dir, checkpoint.Capture(3, first.p, first.opt)); err != nil {
					t.Fatal(err)
				}
				c, err := checkpoint.Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				resumed := newRun(t, spec, 2, opt) // another seed: everything must come from the checkpoint
				if err := c.Restore(resumed.p, resumed.opt); err != nil {
					t.Fatal(err)
				}
				resumed.steps(t, c.Step, 6)
				for i := range whole.p.Nodes {
					if !slices.Equal(resumed.p.Value(i), whole.p.Value(i)) {
						t.Fatalf("%s differs between the resumed and the uninterrupted run", whole.p.Names[i])
					}
				}
				if slices.Equal(whole.p.Value(0), newRun(t, spec, 1, opt).p.Value(0)) {
					t.Fatal("training changed nothing")
				}
			})
		}
	}
}

func TestRestoreRejectsAnotherRunsCheckpoint(t *testing.T) {
	spec := model.Spec{Kind: "mlp", InputShape: []int{5}, Hidden: []int{7}, Activation: "relu", Classes: 3,
		Dtype: tensor.Float64, Batch: 4}
	src := newRun(t, spec, 1, "adam")
	src.steps(t, 0, 1)
	good := checkpoint.Capture(1, src.p, src.opt)

	other := spec
	other.Hidden = []int{8}
	other32 := spec
	other32.Dtype = tensor.Float32
	for _, c := range []struct {
		name string
		spec model.Spec
		opt  string
	}{{"another model", other, "adam"}, {"another dtype", other32, "adam"}, {"another optimizer", spec, "momentum"},
		{"another shape", spec, "adam"}} {
		dst := newRun(t, c.spec, 2, c.opt)
		before := dst.p.Value(0)
		ck := good
		if c.name == "another shape" {
			ck = transposed(good)
		}
		err := ck.Restore(dst.p, dst.opt)
		if !errors.Is(err, checkpoint.ErrIncompatible) {
			t.Errorf("%s: Restore gave %v; want checkpoint.ErrIncompatible", c.name, err)
		}
		if !slices.Equal(dst.p.Value(0), before) || dst.opt.State().Step != 0 {
			t.Errorf("%s: a refused Restore changed the run", c.name)
		}
	}
}

// transposed is c with fc1.weight's recorded shape reversed: the sizes
// still agree, so only the shape check can refuse it.
func transposed(c *checkpoint.Checkpoint) *checkpoint.Checkpoint {
	out := *c
	out.Shapes = map[string][]int{}
	for k, v := range c.Shapes {
		out.Shapes[k] = slices.Clone(v)
	}
	slices.Reverse(out.Shapes["fc1.weight"])
	return &out
}

// A captured checkpoint's params directory is a valid --init directory.
func TestCheckpointParamsAreAnInitDirectory(t *testing.T) {
	spec := model.Spec{Kind: "mlp", InputShape: []int{5}, Hidden: []int{7}, Activation: "tanh", Classes: 3,
		Dtype: tensor.Float32, Batch: 4}
	src := newRun(t, spec, 1, "sgd")
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := checkpoint.Save(dir, checkpoint.Capture(0, src.p, src.opt)); err != nil {
		t.Fatal(err)
	}
	dst, err := model.NewParams(spec, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.LoadNPY(filepath.Join(dir, "step-000000000", "params")); err != nil {
		t.Fatal(err)
	}
	for i := range src.p.Nodes {
		if !slices.Equal(dst.Value(i), src.p.Value(i)) {
			t.Errorf("%s differs after loading the checkpoint's params as --init", src.p.Names[i])
		}
	}
}
