package layers

import (
	"testing"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestOpsAllocateOnce runs a convolution and a pooling block once through a
// tape machine, then calls every op of this package again on the same
// inputs: after the first run, no Do allocates. The sizes keep every matrix
// product under gonum's threshold for going parallel (4 blocks of 64×64),
// where it allocates goroutines of its own; internal/gemm's kernels are
// measured by their own tests.
func TestOpsAllocateOnce(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		g := gorgonia.NewGraph()
		x := gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(4, 3, 12, 12), gorgonia.WithName("x"),
			gorgonia.WithInit(gorgonia.GlorotU(1)))
		w := gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(5, 3, 5, 5), gorgonia.WithName("w"),
			gorgonia.WithInit(gorgonia.GlorotU(1)))
		b := gorgonia.NewVector(g, dt, gorgonia.WithShape(5), gorgonia.WithName("b"), gorgonia.WithInit(gorgonia.Zeroes()))
		z, err := Conv2d(x, w, b, ConvOpts{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := MaxPool2d(z, [2]int{2, 2}, [2]int{2, 2})
		if err != nil {
			t.Fatal(err)
		}
		cost, err := gorgonia.Sum(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gorgonia.Grad(cost, x, w, b); err != nil {
			t.Fatal(err)
		}
		vm := gorgonia.NewTapeMachine(g)
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		type call struct {
			op gorgonia.Op
			in []gorgonia.Value
		}
		// Inputs of the right shapes: what the ops compute from is irrelevant here.
		dense := func(s tensor.Shape) gorgonia.Value { return tensor.New(tensor.WithShape(s...), tensor.Of(dt)) }
		var calls []call
		for _, n := range g.AllNodes() {
			var in []gorgonia.Value
			switch op := n.Op().(type) {
			case *convOp:
				in = []gorgonia.Value{x.Value(), w.Value(), b.Value()}
			case *convFilterGradOp:
				in = []gorgonia.Value{dense(op.fwd.outShape())}
			case *convBiasGradOp:
				in = []gorgonia.Value{dense(op.fwd.outShape())}
			case *convInputGradOp:
				in = []gorgonia.Value{w.Value(), dense(op.fwd.outShape())}
			case *poolOp:
				in = []gorgonia.Value{dense(op.inShape())}
			case *poolGradOp:
				in = []gorgonia.Value{dense(op.fwd.outShape())}
			default:
				continue
			}
			calls = append(calls, call{op: n.Op(), in: in})
		}
		_ = vm.Close()
		if len(calls) != 6 {
			t.Fatalf("%v: %d ops of this package in the graph, want 6", dt, len(calls))
		}
		allocs := testing.AllocsPerRun(20, func() {
			for _, c := range calls {
				if _, err := c.op.Do(c.in...); err != nil {
					t.Fatal(err)
				}
			}
		})
		if allocs != 0 {
			t.Errorf("%v: %v allocations per step of the six ops after the first run, want 0", dt, allocs)
		}
	}
}

// TestUsePreallocDo checks the path the tape machine takes when it hands an
// op a register: a fitting one is written and returned, with Do's values;
// one of another shape or dtype is left alone for the op's own buffer.
func TestUsePreallocDo(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(2, 2, 5, 5), gorgonia.WithName("x"),
		gorgonia.WithInit(gorgonia.GlorotU(1)))
	w := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(3, 2, 3, 3), gorgonia.WithName("w"),
		gorgonia.WithInit(gorgonia.GlorotU(1)))
	z, err := Conv2d(x, w, nil, ConvOpts{Padding: [2]int{1, 1}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := MaxPool2d(z, [2]int{2, 2}, [2]int{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	conv, pool := z.Op().(*convOp), p.Op().(*poolOp)
	want, err := conv.Do(x.Value(), w.Value())
	if err != nil {
		t.Fatal(err)
	}
	wantData := append([]float64(nil), want.Data().([]float64)...)
	reg := tensor.New(tensor.WithShape(2, 3, 5, 5), tensor.Of(tensor.Float64))
	got, err := conv.UsePreallocDo(reg, x.Value(), w.Value())
	if err != nil || got != gorgonia.Value(reg) {
		t.Fatalf("UsePreallocDo with a fitting register returned %p (%v), want the register %p", got, err, reg)
	}
	for i, v := range reg.Float64s() {
		if v != wantData[i] {
			t.Fatalf("UsePreallocDo's [%d] = %v, Do's %v", i, v, wantData[i])
		}
	}
	misfit := tensor.New(tensor.WithShape(2, 3, 5, 5), tensor.Of(tensor.Float32))
	if got, err := conv.UsePreallocDo(misfit, x.Value(), w.Value()); err != nil || got != gorgonia.Value(conv.out.t) {
		t.Fatalf("UsePreallocDo with a float32 register: %v (%v), want the op's own buffer", got, err)
	}
	preg := tensor.New(tensor.WithShape(2, 3, 4, 4), tensor.Of(tensor.Float64))
	if got, err := pool.UsePreallocDo(preg, reg); err != nil || got != gorgonia.Value(preg) {
		t.Fatalf("pool UsePreallocDo: %v (%v), want the register", got, err)
	}
}
