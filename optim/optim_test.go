package optim

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
	"go.uber.org/goleak"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Two parameters, [1, -2] and [0.5], and three steps of gradients.
var (
	start = [][]float64{{1, -2}, {0.5}}
	steps = [][][]float64{
		{{0.5, -1}, {2}},
		{{0.25, 0.5}, {-1}},
		{{-0.5, 1}, {0.5}},
	}
)

// tensors views vals in dtype d (float32 values are rounded copies).
func tensors(d pg.Dtype, vals [][]float64) []pg.Tensor {
	out := make([]pg.Tensor, len(vals))
	for i, v := range vals {
		out[i] = convert(pg.Float64s(slices.Clone(v)), d)
	}
	return out
}

// run steps a fresh optimizer over the given steps from start and
// returns the parameters.
func run(t *testing.T, name string, lr float64, d pg.Dtype, grads [][][]float64) [][]float64 {
	t.Helper()
	o, err := New(name, lr, len(start))
	if err != nil {
		t.Fatal(err)
	}
	params := tensors(d, start)
	for s, g := range grads {
		if err := o.Step(params, tensors(d, g)); err != nil {
			t.Fatalf("step %d: %v", s+1, err)
		}
	}
	if st := o.State(); st.Step != len(grads) {
		t.Errorf("State().Step = %d after %d steps", st.Step, len(grads))
	}
	out := make([][]float64, len(params))
	for i, p := range params {
		out[i] = toFloat64s(p)
	}
	return out
}

func closeTo(t *testing.T, what string, got, want [][]float64, rel float64) {
	t.Helper()
	for i := range want {
		for k := range want[i] {
			if d := math.Abs(got[i][k] - want[i][k]); d > rel*math.Abs(want[i][k]) {
				t.Errorf("%s: param %d[%d] = %.17g, want %.17g (off by %.3g)", what, i, k, got[i][k], want[i][k], d)
			}
		}
	}
}

// Worked by hand: p -= 0.1·(g1+g2+g3).
func TestSGDByHand(t *testing.T) {
	want := [][]float64{{0.975, -2.05}, {0.35}}
	closeTo(t, "float64", run(t, "sgd", 0.1, pg.Float64, steps), want, 1e-15)
	closeTo(t, "float32", run(t, "sgd", 0.1, pg.Float32, steps), want, 1e-7)
}

// Worked by hand, μ = 0.9: buf = g1; buf = 0.9·buf + g; p -= 0.1·buf.
//
//	p0[0]: buf 0.5, 0.7, 0.13   → p 0.95, 0.88, 0.867
//	p0[1]: buf -1, -0.4, 0.64   → p -1.9, -1.86, -1.924
//	p1:    buf 2, 0.8, 1.22     → p 0.3, 0.22, 0.098
func TestMomentumByHand(t *testing.T) {
	want := [][]float64{{0.867, -1.924}, {0.098}}
	closeTo(t, "float64", run(t, "momentum", 0.1, pg.Float64, steps), want, 1e-14)
	closeTo(t, "float32", run(t, "momentum", 0.1, pg.Float32, steps), want, 1e-6)
	// After one step the buffer is the gradient itself.
	o, _ := New("momentum", 0.1, 2)
	if err := o.Step(tensors(pg.Float64, start), tensors(pg.Float64, steps[0])); err != nil {
		t.Fatal(err)
	}
	if got := o.State().Buffers["momentum/0"]; !slices.Equal(got, steps[0][0]) {
		t.Errorf("momentum/0 after one step = %v, want the gradient %v", got, steps[0][0])
	}
}

// Adam's first step moves each value by lr·g/(|g|+ε) (m̂ = g, v̂ = g²),
// and three steps match the textbook formulas.
func TestAdamByHand(t *testing.T) {
	const lr, eps = 0.01, 1e-8
	first := [][]float64{{1 - lr*0.5/(0.5+eps), -2 + lr*1/(1+eps)}, {0.5 - lr*2/(2+eps)}}
	closeTo(t, "float64 step 1", run(t, "adam", lr, pg.Float64, steps[:1]), first, 1e-15)
	closeTo(t, "float32 step 1", run(t, "adam", lr, pg.Float32, steps[:1]), first, 1e-7)

	want := textbookAdam(lr, eps)
	closeTo(t, "float64", run(t, "adam", lr, pg.Float64, steps), want, 1e-14)
	closeTo(t, "float32", run(t, "adam", lr, pg.Float32, steps), want, 1e-6)
	if got := run(t, "adam", lr, pg.Float32, steps); slices.Equal(got[0], start[0]) {
		t.Error("float32 Adam left the parameters unchanged")
	}
}

// textbookAdam is Kingma & Ba's algorithm over steps, in float64.
func textbookAdam(lr, eps float64) [][]float64 {
	const b1, b2 = 0.9, 0.999
	p := [][]float64{slices.Clone(start[0]), slices.Clone(start[1])}
	m := [][]float64{make([]float64, 2), make([]float64, 1)}
	v := [][]float64{make([]float64, 2), make([]float64, 1)}
	for s, grads := range steps {
		t := float64(s + 1)
		for i, g := range grads {
			for k := range g {
				m[i][k] = b1*m[i][k] + (1-b1)*g[k]
				v[i][k] = b2*v[i][k] + (1-b2)*g[k]*g[k]
				mHat, vHat := m[i][k]/(1-math.Pow(b1, t)), v[i][k]/(1-math.Pow(b2, t))
				p[i][k] -= lr * mHat / (math.Sqrt(vHat) + eps)
			}
		}
	}
	return p
}

// float32 Adam runs every tensor operation in float32: over awkward
// values it equals, bitwise, PyTorch's sequence of in-place float32 ops
// written out here.
func TestAdamFloat32IsTorchsOpSequence(t *testing.T) {
	const lr, n, nsteps = 0.003, 16, 5
	rng := rand.New(rand.NewPCG(1, 2))
	p0 := make([]float32, n)
	grads := make([][]float32, nsteps)
	for k := range p0 {
		p0[k] = float32(rng.NormFloat64() * 1e-3) // near the update's size, so its last bits show
	}
	for s := range grads {
		grads[s] = make([]float32, n)
		for k := range grads[s] {
			grads[s][k] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-4)))
		}
	}

	beta1, beta2 := 0.9, 0.999 // variables: 1-beta1 rounds as in Python
	p, m, v := slices.Clone(p0), make([]float32, n), make([]float32, n)
	for s, g := range grads {
		step := float64(s + 1)
		bc1, bc2 := 1-math.Pow(beta1, step), 1-math.Pow(beta2, step)
		stepSize := lr / bc1
		for k := range p {
			m[k] = m[k] + float32(float32(1-beta1)*(g[k]-m[k]))           // lerp_
			v[k] = float32(v[k] * float32(beta2))                         // mul_
			v[k] = v[k] + float32(float32(float32(1-beta2)*g[k])*g[k])    // addcmul_
			denom := float32(math.Sqrt(float64(v[k])))                    // sqrt
			denom = float32(denom / float32(math.Sqrt(bc2)))              // div
			denom = denom + float32(1e-8)                                 // add_
			p[k] = p[k] + float32(float32(float32(-stepSize)*m[k])/denom) // addcdiv_
		}
	}

	o, err := New("adam", lr, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(p0)
	for s, g := range grads {
		if err := o.Step([]pg.Tensor{pg.Float32s(got)}, []pg.Tensor{pg.Float32s(g)}); err != nil {
			t.Fatalf("step %d: %v", s+1, err)
		}
	}
	st := o.State()
	for k := range p {
		if got[k] != p[k] || float32(st.Buffers["exp_avg/0"][k]) != m[k] || float32(st.Buffers["exp_avg_sq/0"][k]) != v[k] {
			t.Errorf("element %d: p, m, v = %v, %v, %v; want %v, %v, %v", k,
				got[k], st.Buffers["exp_avg/0"][k], st.Buffers["exp_avg_sq/0"][k], p[k], m[k], v[k])
		}
	}
}

func TestNewRejectsBadArguments(t *testing.T) {
	_, err := New("rmsprop", 0.1, 1)
	if err == nil || !strings.Contains(err.Error(), "sgd, momentum, adam") {
		t.Errorf("unknown name: %v; want an error listing the choices", err)
	}
	for _, lr := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := New("sgd", lr, 1); err == nil {
			t.Errorf("learning rate %v accepted", lr)
		}
	}
	if _, err := New("sgd", 0.1, 0); err == nil {
		t.Error("zero parameters accepted")
	}
}

func TestStepRejectsMismatchedArguments(t *testing.T) {
	o, _ := New("adam", 0.1, 2)
	good := tensors(pg.Float64, start)
	for _, c := range []struct {
		name          string
		params, grads []pg.Tensor
	}{
		{"too few", good[:1], good[:1]},
		{"dtype differs", good, tensors(pg.Float32, start)},
		{"length differs", good, tensors(pg.Float64, [][]float64{{1}, {2}})},
		{"integers", []pg.Tensor{pg.Int64s([]int64{1, 2}), good[1]}, []pg.Tensor{pg.Int64s([]int64{1, 2}), good[1]}},
	} {
		if err := o.Step(c.params, c.grads); err == nil {
			t.Errorf("%s: Step accepted it", c.name)
		}
	}
	if o.State().Step != 0 {
		t.Error("a failed Step counted as a step")
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// NodeTensors views a Gorgonia parameter and its gradient: stepping SGD
// on cost = Σ w·x moves w by −lr·x in the node's own value.
func TestNodeTensorsStepsGorgoniaValues(t *testing.T) {
	g := gorgonia.NewGraph()
	w := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(3), gorgonia.WithName("w"),
		gorgonia.WithValue(tensor.New(tensor.WithBacking([]float32{1, 2, 3}))))
	x := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(3), gorgonia.WithName("x"),
		gorgonia.WithValue(tensor.New(tensor.WithBacking([]float32{0.5, -1, 2}))))
	prod, err := gorgonia.HadamardProd(w, x)
	if err != nil {
		t.Fatal(err)
	}
	cost, err := gorgonia.Sum(prod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gorgonia.Grad(cost, w); err != nil {
		t.Fatal(err)
	}
	if _, _, err := NodeTensors(gorgonia.Nodes{w}); err == nil || !strings.Contains(err.Error(), "RunAll") {
		t.Errorf("before any run: %v; want an error saying to run the graph", err)
	}
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		t.Fatal(err)
	}
	ps, gs, err := NodeTensors(gorgonia.Nodes{w})
	if err != nil {
		t.Fatal(err)
	}
	opt, _ := New("sgd", 0.5, 1)
	if err := opt.Step(ps, gs); err != nil {
		t.Fatal(err)
	}
	got := w.Value().Data().([]float32)
	want := []float32{0.75, 2.5, 2}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("w = %v, want %v", got, want)
		}
	}
}
