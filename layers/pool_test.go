package layers_test

import (
	"math"
	"strings"
	"testing"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type poolCase struct {
	name           string
	n, c, h, w     int
	kernel, stride [2]int
}

var poolCases = []poolCase{
	{"lenet", 2, 3, 8, 8, [2]int{2, 2}, [2]int{2, 2}},
	{"odd-floor", 3, 2, 7, 9, [2]int{2, 2}, [2]int{2, 2}},
	{"overlap", 2, 2, 7, 6, [2]int{3, 3}, [2]int{2, 1}},
	{"batch1-rect", 1, 1, 5, 8, [2]int{2, 3}, [2]int{1, 3}},
}

// newPoolNet pools x with this package's op or Gorgonia's MaxPool2D and
// differentiates a weighted sum of the result with respect to x.
func newPoolNet(t testing.TB, dt tensor.Dtype, pc poolCase, ours bool, vals []float64) (x, out, dx *gorgonia.Node) {
	t.Helper()
	g := gorgonia.NewGraph()
	xs := tensor.Shape{pc.n, pc.c, pc.h, pc.w}
	x = gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(xs...), gorgonia.WithName("x"),
		gorgonia.WithValue(tensorOf(dt, xs, vals)))
	if ours {
		out = must(layers.MaxPool2d(x, pc.kernel, pc.stride))
	} else {
		out = must(gorgonia.MaxPool2D(x, tensor.Shape{pc.kernel[0], pc.kernel[1]}, []int{0, 0}, pc.stride[:]))
	}
	grads, err := gorgonia.Grad(weightedSum(t, out, 5), x)
	if err != nil {
		t.Fatal(err)
	}
	run(t, g)
	return x, out, grads[0]
}

// TestMaxPool2dMatchesGorgonia compares the output and the input gradient
// with Gorgonia's MaxPool2D on random values (no ties, no NaN).
func TestMaxPool2dMatchesGorgonia(t *testing.T) {
	for _, dt := range dtypes {
		for _, pc := range poolCases {
			t.Run(dt.String()+"/"+pc.name, func(t *testing.T) {
				vals := randVals(6, pc.n*pc.c*pc.h*pc.w)
				_, ours, dOurs := newPoolNet(t, dt, pc, true, vals)
				_, ref, dRef := newPoolNet(t, dt, pc, false, vals)
				if !ours.Shape().Eq(ref.Shape()) {
					t.Fatalf("output shape %v, Gorgonia's %v", ours.Shape(), ref.Shape())
				}
				assertClose(t, "out", float64s(t, ours.Value()), float64s(t, ref.Value()), 0)
				assertClose(t, "dx", float64s(t, dOurs.Value()), float64s(t, dRef.Value()), tolFor(dt))
			})
		}
	}
}

// TestMaxPool2dTiesAndNaN pins PyTorch's choices: the first maximum of a
// window in row-major order takes the gradient; a NaN wins over numbers
// (the last NaN of the window); a window of -Inf gives -Inf with its
// gradient at the first element.
func TestMaxPool2dTiesAndNaN(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(-1)
	// One 2×6 plane, three 2×2 windows: ties, two NaNs, all -Inf.
	vals := []float64{
		5, 5, 1, nan, inf, inf,
		5, 2, nan, 9, inf, inf,
	}
	for _, dt := range dtypes {
		pc := poolCase{"", 1, 1, 2, 6, [2]int{2, 2}, [2]int{2, 2}}
		g := gorgonia.NewGraph()
		x := gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(1, 1, 2, 6), gorgonia.WithName("x"),
			gorgonia.WithValue(tensorOf(dt, tensor.Shape{1, 1, 2, 6}, vals)))
		out := must(layers.MaxPool2d(x, pc.kernel, pc.stride))
		grads, err := gorgonia.Grad(must(gorgonia.Sum(out)), x)
		if err != nil {
			t.Fatal(err)
		}
		run(t, g)
		got := float64s(t, out.Value())
		if got[0] != 5 || !math.IsNaN(got[1]) || !math.IsInf(got[2], -1) {
			t.Fatalf("%v: out %v, want [5 NaN -Inf]", dt, got)
		}
		want := []float64{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0}
		assertClose(t, dt.String()+" dx", float64s(t, grads[0].Value()), want, 0)
	}
}

// TestMaxPool2dNumericalGradient checks the float64 gradient against
// central differences (random values are far enough apart that no
// perturbation changes an argmax).
func TestMaxPool2dNumericalGradient(t *testing.T) {
	pc := poolCases[2]
	g := gorgonia.NewGraph()
	xs := tensor.Shape{pc.n, pc.c, pc.h, pc.w}
	x := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(xs...), gorgonia.WithName("x"),
		gorgonia.WithValue(tensorOf(tensor.Float64, xs, randVals(8, xs.TotalSize()))))
	cost := weightedSum(t, must(layers.MaxPool2d(x, pc.kernel, pc.stride)), 9)
	grads, err := gorgonia.Grad(cost, x)
	if err != nil {
		t.Fatal(err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer func() { _ = vm.Close() }()
	eval := func() float64 {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		return cost.Value().Data().(float64)
	}
	eval()
	analytic := float64s(t, grads[0].Value())
	assertClose(t, "dx", analytic, numericGrad(x.Value().Data().([]float64), eval), 1e-8)
}

func TestMaxPool2dErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(2, 3, 4, 4), gorgonia.WithName("x"))
	x2 := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(4, 4), gorgonia.WithName("x2"))
	xi := gorgonia.NewTensor(g, tensor.Int, 4, gorgonia.WithShape(2, 3, 4, 4), gorgonia.WithName("xi"))
	for _, tc := range []struct {
		name           string
		x              *gorgonia.Node
		kernel, stride [2]int
		want           string
	}{
		{"2-D", x2, [2]int{2, 2}, [2]int{2, 2}, "reshape it to 4-D"},
		{"int", xi, [2]int{2, 2}, [2]int{2, 2}, "only float32 and float64"},
		{"zero kernel", x, [2]int{0, 2}, [2]int{2, 2}, "must be positive"},
		{"big kernel", x, [2]int{5, 2}, [2]int{2, 2}, "does not fit"},
	} {
		if _, err := layers.MaxPool2d(tc.x, tc.kernel, tc.stride); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	out, err := layers.MaxPool2d(x, [2]int{2, 2}, [2]int{})
	if err != nil || !out.Shape().Eq(tensor.Shape{2, 3, 2, 2}) {
		t.Errorf("zero stride: %v %v, want the kernel's stride and shape (2, 3, 2, 2)", out.Shape(), err)
	}
}
