package layers_test

import (
	"testing"

	"github.com/goddp/ddp/layers"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// BenchmarkLenetConvBlocks runs forward and backward of LeNet-5's two
// convolution blocks (28×28 input, batch 32, float32) through a tape
// machine, with this package's Conv2d and MaxPool2d (ours) and with
// Gorgonia's Conv2d, broadcast bias and MaxPool2D (gorgonia), as the model
// zoo built them. Compare the two in one run:
//
//	go test ./layers/ -run '^$' -bench LenetConvBlocks -benchmem -count 5
func BenchmarkLenetConvBlocks(b *testing.B) {
	for _, impl := range []struct {
		name string
		ours bool
	}{{"ours", true}, {"gorgonia", false}} {
		b.Run(impl.name, func(b *testing.B) {
			net := newLenet(b, tensor.Float32, 32, 28, impl.ours, false)
			vm := gorgonia.NewTapeMachine(net.g)
			defer func() { _ = vm.Close() }()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMaxPool2d is the forward and backward of LeNet's first pooling
// (batch 32, 6×28×28, float32) alone, this package's against Gorgonia's.
func BenchmarkMaxPool2d(b *testing.B) {
	for _, impl := range []struct {
		name string
		ours bool
	}{{"ours", true}, {"gorgonia", false}} {
		b.Run(impl.name, func(b *testing.B) {
			pc := poolCase{"", 32, 6, 28, 28, [2]int{2, 2}, [2]int{2, 2}}
			g := gorgonia.NewGraph()
			xs := tensor.Shape{pc.n, pc.c, pc.h, pc.w}
			x := gorgonia.NewTensor(g, tensor.Float32, 4, gorgonia.WithShape(xs...), gorgonia.WithName("x"),
				gorgonia.WithValue(tensorOf(tensor.Float32, xs, randVals(6, xs.TotalSize()))))
			var out *gorgonia.Node
			if impl.ours {
				out = must(layers.MaxPool2d(x, pc.kernel, pc.stride))
			} else {
				out = must(gorgonia.MaxPool2D(x, tensor.Shape{2, 2}, []int{0, 0}, []int{2, 2}))
			}
			if _, err := gorgonia.Grad(must(gorgonia.Sum(out)), x); err != nil {
				b.Fatal(err)
			}
			vm := gorgonia.NewTapeMachine(g)
			defer func() { _ = vm.Close() }()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				vm.Reset()
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
