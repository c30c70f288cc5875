package layers_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

type convCase struct {
	name        string
	n, c, h, w  int
	o, kh, kw   int
	pad, stride [2]int
	bias        bool
}

var convCases = []convCase{
	{name: "lenet1", n: 2, c: 1, h: 8, w: 8, o: 3, kh: 5, kw: 5, pad: [2]int{2, 2}, stride: [2]int{1, 1}, bias: true},
	{name: "stride2-odd", n: 3, c: 2, h: 7, w: 9, o: 4, kh: 3, kw: 2, pad: [2]int{1, 0}, stride: [2]int{2, 2}, bias: true},
	{name: "batch1-nobias", n: 1, c: 3, h: 5, w: 6, o: 2, kh: 3, kw: 3, stride: [2]int{1, 1}},
	{name: "stride21-pad21", n: 2, c: 2, h: 6, w: 5, o: 3, kh: 3, kw: 3, pad: [2]int{2, 1}, stride: [2]int{2, 1},
		bias: true},
	{name: "1x1", n: 2, c: 4, h: 3, w: 3, o: 5, kh: 1, kw: 1, stride: [2]int{1, 1}, bias: true},
	{name: "stride3-bigpad", n: 2, c: 2, h: 5, w: 4, o: 2, kh: 2, kw: 3, pad: [2]int{3, 2}, stride: [2]int{3, 2}},
}

// convNet is one convolution in a graph of its own with a weighted-sum cost.
type convNet struct {
	g          *gorgonia.ExprGraph
	x, w, b    *gorgonia.Node
	out, cost  *gorgonia.Node
	gx, gw, gb *gorgonia.Node
}

// newConvNet builds cc with this package's op (ours) or Gorgonia's
// Conv2d plus a broadcast bias, from fixed values, and its gradients
// (gx only when wantDx).
func newConvNet(t testing.TB, dt tensor.Dtype, cc convCase, ours, wantDx bool) *convNet {
	t.Helper()
	g := gorgonia.NewGraph()
	xs := tensor.Shape{cc.n, cc.c, cc.h, cc.w}
	ws := tensor.Shape{cc.o, cc.c, cc.kh, cc.kw}
	net := &convNet{g: g}
	net.x = gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(xs...), gorgonia.WithName("x"),
		gorgonia.WithValue(tensorOf(dt, xs, randVals(1, xs.TotalSize()))))
	net.w = gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(ws...), gorgonia.WithName("w"),
		gorgonia.WithValue(tensorOf(dt, ws, randVals(2, ws.TotalSize()))))
	if cc.bias {
		net.b = gorgonia.NewVector(g, dt, gorgonia.WithShape(cc.o), gorgonia.WithName("b"),
			gorgonia.WithValue(tensorOf(dt, tensor.Shape{cc.o}, randVals(3, cc.o))))
	}
	if ours {
		net.out = must(layers.Conv2d(net.x, net.w, net.b, layers.ConvOpts{Padding: cc.pad, Stride: cc.stride,
			NoInputGrad: !wantDx}))
	} else {
		net.out = refConv(t, net.x, net.w, net.b, cc)
	}
	net.cost = weightedSum(t, net.out, 4)
	wrt := gorgonia.Nodes{net.w}
	if cc.bias {
		wrt = append(wrt, net.b)
	}
	if wantDx {
		wrt = append(wrt, net.x)
	}
	grads, err := gorgonia.Grad(net.cost, wrt...)
	if err != nil {
		t.Fatal(err)
	}
	net.gw = grads[0]
	if cc.bias {
		net.gb = grads[1]
	}
	if wantDx {
		net.gx = grads[len(grads)-1]
	}
	return net
}

func refConv(t testing.TB, x, w, b *gorgonia.Node, cc convCase) *gorgonia.Node {
	t.Helper()
	z := must(gorgonia.Conv2d(x, w, tensor.Shape{cc.kh, cc.kw}, cc.pad[:], cc.stride[:], []int{1, 1}))
	if b == nil {
		return z
	}
	b4 := must(gorgonia.Reshape(b, tensor.Shape{1, cc.o, 1, 1}))
	return must(gorgonia.BroadcastAdd(z, b4, nil, []byte{0, 2, 3}))
}

var dtypes = []tensor.Dtype{tensor.Float32, tensor.Float64}

// TestConv2dMatchesGorgonia compares the output and the gradients of x, w
// and b with Gorgonia's Conv2d (and a broadcast bias) on the same values.
func TestConv2dMatchesGorgonia(t *testing.T) {
	for _, dt := range dtypes {
		for _, cc := range convCases {
			t.Run(dt.String()+"/"+cc.name, func(t *testing.T) {
				ours := newConvNet(t, dt, cc, true, true)
				ref := newConvNet(t, dt, cc, false, true)
				run(t, ours.g)
				run(t, ref.g)
				if !ours.out.Shape().Eq(ref.out.Shape()) {
					t.Fatalf("output shape %v, Gorgonia's %v", ours.out.Shape(), ref.out.Shape())
				}
				tol := tolFor(dt)
				assertClose(t, "out", float64s(t, ours.out.Value()), float64s(t, ref.out.Value()), tol)
				assertClose(t, "dw", float64s(t, ours.gw.Value()), float64s(t, ref.gw.Value()), tol)
				assertClose(t, "dx", float64s(t, ours.gx.Value()), float64s(t, ref.gx.Value()), tol)
				if cc.bias {
					assertClose(t, "db", float64s(t, ours.gb.Value()), float64s(t, ref.gb.Value()), tol)
				}
			})
		}
	}
}

// TestConv2dNumericalGradients checks the float64 gradients against central
// differences of the cost.
func TestConv2dNumericalGradients(t *testing.T) {
	for _, cc := range convCases {
		t.Run(cc.name, func(t *testing.T) {
			net := newConvNet(t, tensor.Float64, cc, true, true)
			vm := gorgonia.NewTapeMachine(net.g)
			defer func() { _ = vm.Close() }()
			cost := func() float64 {
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					t.Fatal(err)
				}
				return net.cost.Value().Data().(float64)
			}
			cost()
			pairs := []struct {
				name     string
				in, grad *gorgonia.Node
			}{{"x", net.x, net.gx}, {"w", net.w, net.gw}, {"b", net.b, net.gb}}
			analytic := make([][]float64, len(pairs)) // read all before the runs the differences take
			for i, p := range pairs {
				if p.in != nil {
					analytic[i] = float64s(t, p.grad.Value())
				}
			}
			for i, p := range pairs {
				if p.in != nil {
					numeric := numericGrad(p.in.Value().Data().([]float64), cost)
					assertClose(t, "d"+p.name, analytic[i], numeric, 1e-7)
				}
			}
		})
	}
}

// numericGrad is the central-difference gradient of cost over vals, which
// cost reads.
func numericGrad(vals []float64, cost func() float64) []float64 {
	const h = 1e-5
	out := make([]float64, len(vals))
	for i := range vals {
		v := vals[i]
		vals[i] = v + h
		up := cost()
		vals[i] = v - h
		down := cost()
		vals[i] = v
		out[i] = (up - down) / (2 * h)
	}
	return out
}

// countOps counts the graph's nodes whose op prints as name.
func countOps(g *gorgonia.ExprGraph, name string) int {
	n := 0
	for _, node := range g.AllNodes() {
		if node.Op() != nil && node.Op().String() == name {
			n++
		}
	}
	return n
}

// countOpsPrefix counts the graph's nodes whose op's string starts with
// prefix.
func countOpsPrefix(g *gorgonia.ExprGraph, prefix string) int {
	n := 0
	for _, node := range g.AllNodes() {
		if node.Op() != nil && strings.HasPrefix(node.Op().String(), prefix) {
			n++
		}
	}
	return n
}

// TestConv2dNoInputGrad proves that NoInputGrad removes the input gradient
// from the graph instead of computing a cheap one: no input-gradient node
// exists, the other gradients are unchanged, and asking for dx is an error.
func TestConv2dNoInputGrad(t *testing.T) {
	cc := convCases[0]
	with := newConvNet(t, tensor.Float64, cc, true, false)
	if n := countOps(with.g, "Conv2dInputGrad"); n != 0 {
		t.Fatalf("NoInputGrad: %d input-gradient nodes, want 0", n)
	}
	without := newConvNet(t, tensor.Float64, cc, true, true)
	if n := countOps(without.g, "Conv2dInputGrad"); n != 1 {
		t.Fatalf("without NoInputGrad: %d input-gradient nodes, want 1", n)
	}
	// Gorgonia's Conv2d needs no such flag: its im2col node depends on x
	// alone, so Backpropagate never reaches it when x is not asked for. Ours
	// depends on w too, so without NoInputGrad its SymDiff builds dx (which
	// would run every step) whether or not anyone asks for it.
	gorg := newConvNet(t, tensor.Float64, cc, false, false)
	if n := countOpsPrefix(gorg.g, "col2im"); n != 0 {
		t.Fatalf("Gorgonia's Conv2d, x not asked for: %d col2im nodes, want 0", n)
	}
	g0 := gorgonia.NewGraph()
	x0 := gorgonia.NewTensor(g0, tensor.Float64, 4, gorgonia.WithShape(1, 1, 4, 4), gorgonia.WithName("x"))
	w0 := gorgonia.NewTensor(g0, tensor.Float64, 4, gorgonia.WithShape(1, 1, 3, 3), gorgonia.WithName("w"))
	if _, err := gorgonia.Grad(must(gorgonia.Sum(must(layers.Conv2d(x0, w0, nil, layers.ConvOpts{})))), w0); err != nil {
		t.Fatal(err)
	}
	if n := countOps(g0, "Conv2dInputGrad"); n != 1 {
		t.Fatalf("without NoInputGrad, x not asked for: %d input-gradient nodes, want 1", n)
	}
	run(t, with.g)
	run(t, without.g)
	assertClose(t, "dw", float64s(t, with.gw.Value()), float64s(t, without.gw.Value()), 0)
	assertClose(t, "db", float64s(t, with.gb.Value()), float64s(t, without.gb.Value()), 0)

	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 4, 4), gorgonia.WithName("x"))
	w := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(1, 1, 3, 3), gorgonia.WithName("w"))
	out := must(layers.Conv2d(x, w, nil, layers.ConvOpts{NoInputGrad: true}))
	cost := must(gorgonia.Sum(out))
	var sde gorgonia.SymDiffError
	if _, err := gorgonia.Grad(cost, x); !errors.As(err, &sde) {
		t.Fatalf("Grad with respect to a NoInputGrad input: %v, want a gorgonia.SymDiffError", err)
	}
}

func TestConv2dErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(2, 3, 8, 8), gorgonia.WithName("x"))
	x3 := gorgonia.NewTensor(g, tensor.Float32, 3, gorgonia.WithShape(3, 8, 8), gorgonia.WithName("x3"))
	x64 := gorgonia.NewTensor(g, tensor.Float64, 4, gorgonia.WithShape(2, 3, 8, 8), gorgonia.WithName("x64"))
	xi := gorgonia.NewTensor(g, tensor.Int, 4, gorgonia.WithShape(2, 3, 8, 8), gorgonia.WithName("xi"))
	w := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(4, 3, 5, 5), gorgonia.WithName("w"))
	wc := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(4, 2, 5, 5), gorgonia.WithName("wc"))
	wi := gorgonia.NewTensor(g, tensor.Int, 4, gorgonia.WithShape(4, 3, 5, 5), gorgonia.WithName("wi"))
	b5 := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(5), gorgonia.WithName("b5"))
	for _, tc := range []struct {
		name    string
		x, w, b *gorgonia.Node
		opts    layers.ConvOpts
		want    string
	}{
		{"3-D x", x3, w, nil, layers.ConvOpts{}, "reshape it to 4-D"},
		{"channels", x, wc, nil, layers.ConvOpts{}, "it must be [out_channels, 3,"},
		{"dtypes", x64, w, nil, layers.ConvOpts{}, "convert them to one dtype"},
		{"int", xi, wi, nil, layers.ConvOpts{}, "only float32 and float64"},
		{"bias", x, w, b5, layers.ConvOpts{}, "it must be [4]"},
		{"negative", x, w, nil, layers.ConvOpts{Stride: [2]int{-1, 1}}, "must not be negative"},
		{"too small", x, w, nil, layers.ConvOpts{Stride: [2]int{1, 1}, Padding: [2]int{0, 0}}, ""},
	} {
		_, err := layers.Conv2d(tc.x, tc.w, tc.b, tc.opts)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	big := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(4, 3, 9, 9), gorgonia.WithName("big"))
	if _, err := layers.Conv2d(x, big, nil, layers.ConvOpts{}); err == nil ||
		!strings.Contains(err.Error(), "does not fit") {
		t.Errorf("kernel larger than the input: %v", err)
	}
}
