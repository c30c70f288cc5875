package layers_test

import (
	"testing"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// lenet is LeNet-5's two convolution blocks (5×5 convolution with bias,
// ReLU, 2×2 max pooling of stride 2; the first padded by 2) and a linear
// head, built with this package's ops (ours) or Gorgonia's, from the same
// values.
type lenet struct {
	g      *gorgonia.ExprGraph
	x      *gorgonia.Node
	params gorgonia.Nodes
	cost   *gorgonia.Node
	grads  gorgonia.Nodes
}

// lenetParams are the shapes of conv1 w, b, conv2 w, b and the head's w for
// a side×side input.
func lenetParams(side int) []tensor.Shape {
	flat := 16 * ((side/2 - 4) / 2) * ((side/2 - 4) / 2)
	return []tensor.Shape{{6, 1, 5, 5}, {6}, {16, 6, 5, 5}, {16}, {flat, 10}}
}

func newLenet(t testing.TB, dt tensor.Dtype, batch, side int, ours, head bool) *lenet {
	t.Helper()
	g := gorgonia.NewGraph()
	net := &lenet{g: g}
	xs := tensor.Shape{batch, 1, side, side}
	net.x = gorgonia.NewTensor(g, dt, 4, gorgonia.WithShape(xs...), gorgonia.WithName("x"),
		gorgonia.WithValue(tensorOf(dt, xs, randVals(10, xs.TotalSize()))))
	shapes := lenetParams(side)
	if !head {
		shapes = shapes[:4]
	}
	for i, s := range shapes {
		vals := randVals(uint64(20+i), s.TotalSize())
		for j := range vals {
			vals[j] *= 0.3
		}
		net.params = append(net.params, gorgonia.NodeFromAny(g, tensorOf(dt, s, vals),
			gorgonia.WithName("p"+string(rune('0'+i)))))
	}
	h := lenetBlock(t, net.x, net.params[0], net.params[1], 2, ours)
	h = lenetBlock(t, h, net.params[2], net.params[3], 0, ours)
	if head {
		flat := must(gorgonia.Reshape(h, tensor.Shape{batch, shapes[4][0]}))
		h = must(gorgonia.Mul(flat, net.params[4]))
	}
	net.cost = weightedSum(t, h, 30)
	var err error
	if net.grads, err = gorgonia.Grad(net.cost, net.params...); err != nil {
		t.Fatal(err)
	}
	return net
}

func lenetBlock(t testing.TB, x, w, b *gorgonia.Node, pad int, ours bool) *gorgonia.Node {
	t.Helper()
	var z *gorgonia.Node
	if ours {
		z = must(layers.Conv2d(x, w, b, layers.ConvOpts{Padding: [2]int{pad, pad}, NoInputGrad: pad == 2}))
	} else {
		ws := w.Shape()
		z = refConv(t, x, w, b, convCase{o: ws[0], kh: ws[2], kw: ws[3], pad: [2]int{pad, pad},
			stride: [2]int{1, 1}})
	}
	z = must(gorgonia.Rectify(z))
	if ours {
		return must(layers.MaxPool2d(z, [2]int{2, 2}, [2]int{2, 2}))
	}
	return must(gorgonia.MaxPool2D(z, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
}

// TestLenetTrainsAsGorgonia trains the LeNet-like net a few SGD steps with
// this package's ops and with Gorgonia's from the same start, and compares
// the costs and final parameters.
func TestLenetTrainsAsGorgonia(t *testing.T) {
	for _, dt := range dtypes {
		t.Run(dt.String(), func(t *testing.T) {
			ours := newLenet(t, dt, 4, 16, true, true)
			ref := newLenet(t, dt, 4, 16, false, true)
			costOurs := trainSGD(t, ours, 5)
			costRef := trainSGD(t, ref, 5)
			tol := 1e-10
			if dt == tensor.Float32 {
				tol = 2e-5
			}
			assertClose(t, "costs", costOurs, costRef, tol)
			for i := range ours.params {
				assertClose(t, ours.params[i].Name(), float64s(t, ours.params[i].Value()),
					float64s(t, ref.params[i].Value()), tol)
			}
		})
	}
}

// trainSGD runs steps of plain SGD and returns the cost before each.
func trainSGD(t testing.TB, net *lenet, steps int) []float64 {
	t.Helper()
	vm := gorgonia.NewTapeMachine(net.g, gorgonia.BindDualValues(net.params...))
	defer func() { _ = vm.Close() }()
	solver := gorgonia.NewVanillaSolver(gorgonia.WithLearnRate(0.01))
	var costs []float64
	for range steps {
		vm.Reset()
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		costs = append(costs, float64s(t, net.cost.Value())[0])
		if err := solver.Step(gorgonia.NodesToValueGrads(net.params)); err != nil {
			t.Fatal(err)
		}
	}
	return costs
}
